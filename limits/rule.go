// Package limits keeps one workspace from starving the others on a shared
// agent: per-workspace token buckets (rate) and in-flight caps
// (concurrency), each applying to the calls whose target matches its
// patterns (pattern/). It knows nothing of Caddy or HTTP: the gate calls
// Limiter.Admit with the call's Key and target after its decision, and
// answers a refusal itself.
//
// Rate state is local (golang.org/x/time/rate buckets in a bounded LRU) or
// shared by every replica through Redis (github.com/go-redis/redis_rate,
// GCRA, one round trip). Concurrency is always per process. The State that
// holds both outlives a Limiter, so a configuration reload keeps the
// budgets (the caller keeps it in a usage pool).
package limits

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/supervaize/supervaizer-sidecar/pattern"
)

// Kinds of a Rule.
const (
	KindRate        = "rate"
	KindConcurrency = "concurrency"
)

// Codes of a refusal (the answer's data.code).
const (
	CodeRateLimited        = "rate_limited"
	CodeConcurrencyLimited = "concurrency_limited"
)

// Bounds of a rule's numbers: enough for any real limit, small enough that
// the arithmetic of both stores stays exact.
const (
	MaxRate        = 1_000_000
	MaxConcurrency = 100_000
)

// SurfacePrefix starts the target of a surface.load call: "surface:<id>",
// so a rule on an action never counts loads of a surface of the same id.
const SurfacePrefix = "surface:"

// periods are the units of a rate ("10/m").
var periods = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// Rule is one limit: Kind, the target patterns it applies to, and its
// numbers. Build rules with NewRateRule and NewConcurrencyRule.
type Rule struct {
	Kind     string
	Patterns pattern.Set
	N        int           // calls per Per (rate) or calls in flight (concurrency)
	Per      time.Duration // rate only: second, minute or hour
	Burst    int           // rate only: bucket size (default N)
	text     string
}

// String is the rule in the Caddyfile's syntax, burst included: its
// identity (a reload that keeps the text keeps the rule's budgets) and its
// name in metrics and the audit line.
func (r *Rule) String() string { return r.text }

// ParseRate reads "<n>/<s|m|h>", n a plain decimal from 1 to MaxRate (no
// sign, no leading zero).
func ParseRate(s string) (n int, per time.Duration, err error) {
	num, unit, ok := strings.Cut(s, "/")
	per, known := periods[unit]
	if !ok || !known {
		return 0, 0, fmt.Errorf("rate %q: want <n>/s, <n>/m or <n>/h", s)
	}
	n, err = strconv.Atoi(num)
	if err != nil || n < 1 || n > MaxRate || strconv.Itoa(n) != num {
		return 0, 0, fmt.Errorf("rate %q: n must be a plain whole number from 1 to %d", s, MaxRate)
	}
	return n, per, nil
}

// NewRateRule builds "rate <patterns>... <rate> [burst <burst>]"; burst 0
// means n. Errors name the rule's problem.
func NewRateRule(patterns []string, rate string, burst int) (*Rule, error) {
	set, err := parsePatterns(patterns)
	if err != nil {
		return nil, err
	}
	n, per, err := ParseRate(rate)
	if err != nil {
		return nil, err
	}
	if burst < 0 || burst > MaxRate {
		return nil, fmt.Errorf("rate %s: burst must be from 1 to %d", rate, MaxRate)
	}
	if burst == 0 {
		burst = n
	}
	text := KindRate + " " + strings.Join(patterns, " ") + " " + rate + " burst " + strconv.Itoa(burst)
	return &Rule{Kind: KindRate, Patterns: set, N: n, Per: per, Burst: burst, text: text}, nil
}

// NewConcurrencyRule builds "concurrency <patterns>... <n>".
func NewConcurrencyRule(patterns []string, n int) (*Rule, error) {
	set, err := parsePatterns(patterns)
	if err != nil {
		return nil, err
	}
	if n < 1 || n > MaxConcurrency {
		return nil, fmt.Errorf("concurrency %d: must be from 1 to %d", n, MaxConcurrency)
	}
	text := KindConcurrency + " " + strings.Join(patterns, " ") + " " + strconv.Itoa(n)
	return &Rule{Kind: KindConcurrency, Patterns: set, N: n, text: text}, nil
}

func parsePatterns(ps []string) (pattern.Set, error) {
	if len(ps) == 0 {
		return nil, errors.New("a rule needs at least one target pattern")
	}
	set, err := pattern.ParseSet(ps)
	if err != nil {
		return nil, err
	}
	for _, p := range set {
		if ns := p.Namespace(); ns != "" && ns+":" != SurfacePrefix {
			return nil, fmt.Errorf("bad target pattern %q: the only namespace is %s<surface id>", p, SurfacePrefix)
		}
	}
	return set, nil
}
