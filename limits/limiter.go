package limits

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// What a call does when the shared store fails (Config.OnStoreError).
const (
	OnStoreErrorLocal = "local" // count it in this process's buckets (default)
	OnStoreErrorDeny  = "deny"  // refuse it: rate_limited, retry after storeRetryAfter
)

// concurrencyRetryAfter is the retry hint of a concurrency refusal: a slot
// frees when a call ends, which the gate cannot foresee.
const concurrencyRetryAfter = time.Second

// Observer is told of each decision; nil funcs are skipped. Called
// synchronously from Admit: keep them cheap.
type Observer struct {
	// Decision: one matching rule's outcome: "allowed", CodeRateLimited or
	// CodeConcurrencyLimited.
	Decision func(rule, outcome string)
	// StoreError: a call to the shared store failed; the call was then
	// counted locally (fallback "local") or refused ("deny").
	StoreError func(err error, fallback string)
}

// Limiter applies one configuration's rules over a State.
type Limiter struct {
	state        *State
	rules        []*Rule
	onStoreError string
	obs          Observer
	now          func() time.Time
}

// NewLimiter builds a Limiter. onStoreError is "", OnStoreErrorLocal or
// OnStoreErrorDeny.
func NewLimiter(state *State, rules []*Rule, onStoreError string, obs Observer) (*Limiter, error) {
	switch onStoreError {
	case "":
		onStoreError = OnStoreErrorLocal
	case OnStoreErrorLocal, OnStoreErrorDeny:
	default:
		return nil, fmt.Errorf("limits: on_store_error must be local or deny, not %q", onStoreError)
	}
	return &Limiter{state: state, rules: rules, onStoreError: onStoreError, obs: obs, now: time.Now}, nil
}

// State is the Limiter's state.
func (l *Limiter) State() *State { return l.state }

// Decision is the outcome of Admit.
type Decision struct {
	// Matched: at least one rule applies to the target.
	Matched bool
	// Refusal is the refusal of a refused call, nil when every matching
	// rule admits it (also when none matches): Code CodeRateLimited or
	// CodeConcurrencyLimited; on /a2a -32029 "Rate limit exceeded" with
	// data {"code", "retry_after"}, on REST routes 429 {"detail"}; both
	// with Retry-After, when the call may succeed (at least 1 s).
	Refusal *refusal.Refusal
	// Rule is the refusing rule (Rule.String), "" when allowed.
	Rule string
	// Fallback: the shared store failed and the call was counted locally.
	Fallback bool
}

// Allowed reports whether every matching rule admits the call.
func (d Decision) Allowed() bool { return d.Refusal == nil }

// Code is the refusal's code, "" when allowed.
func (d Decision) Code() string {
	if d.Refusal == nil {
		return ""
	}
	return d.Refusal.Code
}

// Message is the text of a limit's refusal.
const Message = "Rate limit exceeded"

// Admit checks a call of k to target against every matching rule:
// concurrency first (a slot of each matching rule, this process), then
// rate (a token of each). The first refusal gives back what the earlier
// rules took (slots, local tokens; a token already taken in Redis stays
// spent). When allowed, release (never nil) must be called once the call
// has ended, to free its concurrency slots.
func (l *Limiter) Admit(ctx context.Context, k Key, target string) (d Decision, release func()) {
	release = func() {}
	var undo []func()
	giveBack := func() {
		for _, u := range undo {
			u()
		}
	}
	for _, r := range l.rules {
		if r.Kind != KindConcurrency || !r.Patterns.Match(target) {
			continue
		}
		d.Matched = true
		rel, ok := l.state.acquire(r, k)
		if !ok {
			giveBack()
			l.observe(r, CodeConcurrencyLimited)
			return refuse(d, CodeConcurrencyLimited, r, concurrencyRetryAfter), release
		}
		l.observe(r, "allowed")
		undo = append(undo, rel)
	}
	slots := undo
	for _, r := range l.rules {
		if r.Kind != KindRate || !r.Patterns.Match(target) {
			continue
		}
		d.Matched = true
		wait, u, fallback := l.state.take(ctx, r, k, l.now(), l.onStoreError, l.obs.StoreError)
		d.Fallback = d.Fallback || fallback
		if wait > 0 {
			giveBack()
			l.observe(r, CodeRateLimited)
			return refuse(d, CodeRateLimited, r, wait), release
		}
		l.observe(r, "allowed")
		if u != nil {
			undo = append(undo, u)
		}
	}
	return d, func() {
		for _, s := range slots {
			s()
		}
	}
}

func (l *Limiter) observe(r *Rule, outcome string) {
	if l.obs.Decision != nil {
		l.obs.Decision(r.text, outcome)
	}
}

// refuse is d refused by rule r with code, the call retryable after wait
// (at least 1 s; Retry-After in whole seconds, rounded up).
func refuse(d Decision, code string, r *Rule, wait time.Duration) Decision {
	wait = max(wait, time.Second)
	secs := int((wait + time.Second - 1) / time.Second)
	d.Refusal = &refusal.Refusal{Status: http.StatusTooManyRequests, RPCCode: jsonrpc.CodeRateLimited,
		Code: code, Message: Message, Data: map[string]any{"code": code, "retry_after": secs}, RetryAfter: secs}
	d.Rule = r.text
	return d
}

// RetryAfterSeconds is the Retry-After of a refusal, in whole seconds
// (0 when allowed).
func (d Decision) RetryAfterSeconds() int {
	if d.Refusal == nil {
		return 0
	}
	return d.Refusal.RetryAfter
}
