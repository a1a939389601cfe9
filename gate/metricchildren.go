// The decision counters' children, resolved once per label set: a lookup
// in a Go map instead of prometheus' hash of the label values and its
// vector's lookup on every request.

package gate

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// decisionLabels is one label set of decisions_total: route, outcome, code.
type decisionLabels struct{ route, outcome, code string }

// maxDecisionChildren bounds decisionChildren's map; label sets past it are
// counted through the vector's own lookup. The label values are bounded
// (route classes, outcomes, codes: metrics.go), so the bound is a guard.
const maxDecisionChildren = 1024

// decisionChildren maps the label sets met so far to their counters. Reads
// take no lock (an immutable map behind an atomic pointer); a new label set
// copies the map under mu.
type decisionChildren struct {
	children atomic.Pointer[map[decisionLabels]prometheus.Counter]
	mu       sync.Mutex
}

// decisionCounter is vec's child for l, from the map once it was met.
func (dc *decisionChildren) decisionCounter(vec *prometheus.CounterVec, l decisionLabels) prometheus.Counter {
	if m := dc.children.Load(); m != nil {
		if c, ok := (*m)[l]; ok {
			return c
		}
	}
	c := vec.WithLabelValues(l.route, l.outcome, l.code)
	dc.mu.Lock()
	defer dc.mu.Unlock()
	old := dc.children.Load()
	if old != nil && len(*old) >= maxDecisionChildren {
		return c
	}
	next := make(map[decisionLabels]prometheus.Counter, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[l] = c
	dc.children.Store(&next)
	return c
}

func lenOf(m *map[decisionLabels]prometheus.Counter) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
