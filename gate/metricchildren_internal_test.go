package gate

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counted is c's value.
func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestDecisionChildren: a decision is counted on its label set's child
// whether the child comes from the resolved map or, past its bound, from
// the vector, and the token cache's resolved children count hit and miss.
func TestDecisionChildren(t *testing.T) {
	m := NewMetrics(nil, func() float64 { return 0 })
	for range 3 {
		m.decision("controller", "allow", "token")
	}
	m.decision("controller", "deny", "expired")
	if got := counted(t, m.decisions.WithLabelValues("controller", "allow", "token")); got != 3 {
		t.Fatalf("allow token counted %v, want 3", got)
	}
	if got := counted(t, m.decisions.WithLabelValues("controller", "deny", "expired")); got != 1 {
		t.Fatalf("deny expired counted %v, want 1", got)
	}
	for i := range maxDecisionChildren + 10 {
		m.decision("other", "deny", "c"+strconv.Itoa(i))
		m.decision("other", "deny", "c"+strconv.Itoa(i))
	}
	if n := len(*m.children.Load()); n != maxDecisionChildren {
		t.Fatalf("%d children resolved, want the bound %d", n, maxDecisionChildren)
	}
	last := "c" + strconv.Itoa(maxDecisionChildren+9) // past the bound
	if got := counted(t, m.decisions.WithLabelValues("other", "deny", last)); got != 2 {
		t.Fatalf("label set past the bound counted %v, want 2", got)
	}
	m.ObserveVerify(true, 0, "")
	m.ObserveVerify(true, 0, "")
	m.ObserveVerify(false, 0, "")
	if hit, miss := counted(t, m.tokenCache.WithLabelValues("hit")), counted(t, m.tokenCache.WithLabelValues("miss")); hit != 2 || miss != 1 {
		t.Fatalf("token cache hit %v miss %v, want 2 and 1", hit, miss)
	}
}
