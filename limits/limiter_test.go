package limits

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

func mustRate(t *testing.T, rate string, burst int, ps ...string) *Rule {
	t.Helper()
	r, err := NewRateRule(ps, rate, burst)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustConc(t *testing.T, n int, ps ...string) *Rule {
	t.Helper()
	r, err := NewConcurrencyRule(ps, n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newLimiter(t *testing.T, st *State, onErr string, rules ...*Rule) (*Limiter, *time.Time) {
	t.Helper()
	l, err := NewLimiter(st, rules, onErr, Observer{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	l.now = func() time.Time { return now }
	return l, &now
}

func memState(t *testing.T, maxKeys int) *State {
	t.Helper()
	st, err := NewState(maxKeys, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var (
	wsA = Key{Agent: "agent", Workspace: "ws-a"}
	wsB = Key{Agent: "agent", Workspace: "ws-b"}
)

func TestRateIsPerWorkspaceAndRefills(t *testing.T) {
	l, now := newLimiter(t, memState(t, 0), "", mustRate(t, "10/m", 0, "job.start"))
	ctx := context.Background()
	for i := range 10 {
		if d, _ := l.Admit(ctx, wsA, "job.start"); !d.Allowed() {
			t.Fatalf("call %d of A refused within its burst", i+1)
		}
	}
	d, _ := l.Admit(ctx, wsA, "job.start")
	if d.Allowed() || d.Code() != CodeRateLimited || d.Rule != "rate job.start 10/m burst 10" {
		t.Fatalf("11th call of A: %+v, want rate_limited by the rule", d)
	}
	if got := d.RetryAfterSeconds(); got != 6 {
		t.Errorf("retry after %d s, want 6 (one token per 6 s)", got)
	}
	if d, _ := l.Admit(ctx, wsB, "job.start"); !d.Allowed() {
		t.Error("B refused while only A spent its budget")
	}
	if d, _ := l.Admit(ctx, wsA, "job.sync"); !d.Allowed() || d.Matched {
		t.Errorf("a target no rule matches: %+v", d)
	}
	*now = now.Add(6 * time.Second)
	if d, _ := l.Admit(ctx, wsA, "job.start"); !d.Allowed() {
		t.Error("A refused after a token refilled")
	}
}

func TestBurst(t *testing.T) {
	l, _ := newLimiter(t, memState(t, 0), "", mustRate(t, "1/s", 3, "*"))
	for i := range 3 {
		if d, _ := l.Admit(context.Background(), wsA, "job"); !d.Allowed() {
			t.Fatalf("call %d refused within burst 3", i+1)
		}
	}
	if d, _ := l.Admit(context.Background(), wsA, "job"); d.Allowed() {
		t.Fatal("4th call allowed past burst 3")
	}
}

func TestCallsWithoutAVerifiedWorkspaceShareTheTransportKeysBudget(t *testing.T) {
	l, _ := newLimiter(t, memState(t, 0), "", mustRate(t, "1/h", 0, "*"))
	ctx := context.Background()
	if d, _ := l.Admit(ctx, Key{Agent: "a", Transport: "fp1"}, "x"); !d.Allowed() {
		t.Fatal("first call of a transport key refused")
	}
	if d, _ := l.Admit(ctx, Key{Agent: "a", Transport: "fp1"}, "x"); d.Allowed() {
		t.Error("a second call of the same transport key got a budget of its own")
	}
	if d, _ := l.Admit(ctx, Key{Agent: "a", Transport: "fp2"}, "x"); !d.Allowed() {
		t.Error("another transport key spent the first one's budget")
	}
	if d, _ := l.Admit(ctx, Key{Agent: "a", Workspace: "fp1"}, "x"); !d.Allowed() {
		t.Error("a verified workspace shares a transport key's budget")
	}
}

// TestUnverifiedKeysNeverEvictOrCrowdOutVerifiedOnes: keys a client can
// make up fill their own pool, not the verified workspaces'.
func TestUnverifiedKeysNeverEvictOrCrowdOutVerifiedOnes(t *testing.T) {
	st := memState(t, 3)
	l, _ := newLimiter(t, st, "", mustRate(t, "1/h", 0, "job.start"), mustConc(t, 1, "slow"))
	ctx := context.Background()
	if d, _ := l.Admit(ctx, wsA, "job.start"); !d.Allowed() {
		t.Fatal("A's first job.start refused")
	}
	_, relA := l.Admit(ctx, wsA, "slow")
	defer relA()
	for i := range 10 {
		k := Key{Agent: "agent", Transport: "fp-" + strconv.Itoa(i)}
		l.Admit(ctx, k, "job.start")
		l.Admit(ctx, k, "slow") // held: fills the unverified pool's in-flight keys
	}
	if d, _ := l.Admit(ctx, wsA, "job.start"); d.Allowed() {
		t.Error("unverified keys evicted A's bucket: A's budget was reset")
	}
	if d, _ := l.Admit(ctx, wsB, "slow"); !d.Allowed() {
		t.Errorf("unverified keys in flight crowded out B: %+v", d)
	}
}

func TestConcurrencyReleasesAndRefusalGivesBack(t *testing.T) {
	l, _ := newLimiter(t, memState(t, 0), "",
		mustConc(t, 2, "dataset.*.query"), mustRate(t, "3/h", 0, "dataset.*.query"))
	ctx := context.Background()
	d1, rel1 := l.Admit(ctx, wsA, "dataset.x.query")
	d2, rel2 := l.Admit(ctx, wsA, "dataset.y.query")
	d3, _ := l.Admit(ctx, wsA, "dataset.x.query")
	if !d1.Allowed() || !d2.Allowed() || d3.Allowed() || d3.Code() != CodeConcurrencyLimited {
		t.Fatalf("2 in flight: %v %v %+v", d1.Allowed(), d2.Allowed(), d3)
	}
	if d, rel := l.Admit(ctx, wsB, "dataset.x.query"); !d.Allowed() {
		t.Error("B refused while A holds its slots")
	} else {
		rel()
	}
	rel1()
	rel1() // twice: one slot only
	d4, rel4 := l.Admit(ctx, wsA, "dataset.x.query")
	if !d4.Allowed() {
		t.Fatalf("A refused after a call ended: %+v", d4)
	}
	// The rate rule is now spent (3 tokens: d1, d2, d4): the refusal gives
	// the concurrency slot back.
	rel2()
	rel4()
	d5, _ := l.Admit(ctx, wsA, "dataset.x.query")
	if d5.Allowed() || d5.Code() != CodeRateLimited {
		t.Fatalf("4th call within the hour: %+v", d5)
	}
	if n := l.State().Keys(); n != 2 { // A's bucket and B's; no slot left in flight
		t.Errorf("tracked keys %d, want 2 (refused call kept its slot?)", n)
	}
}

func TestRefusalGivesBackEarlierLocalTokens(t *testing.T) {
	l, _ := newLimiter(t, memState(t, 0), "", mustRate(t, "5/h", 0, "job.start"), mustRate(t, "1/h", 0, "job.*"))
	ctx := context.Background()
	l.Admit(ctx, wsA, "job.sync")  // spends the job.* rule
	l.Admit(ctx, wsA, "job.start") // refused by job.*: job.start's token given back
	for i := range 5 {
		if d, _ := l.Admit(ctx, wsA, "job.start"); d.Code() == CodeRateLimited && d.Rule == "rate job.start 5/h burst 5" {
			t.Fatalf("job.start rule refused after %d calls: a refused call spent its token", i)
		}
	}
}

func TestMaxKeysBoundsMemory(t *testing.T) {
	st := memState(t, 1000)
	l, _ := newLimiter(t, st, "", mustRate(t, "1/h", 0, "*"), mustConc(t, 1, "*"))
	ctx := context.Background()
	for i := range 100_000 {
		d, rel := l.Admit(ctx, Key{Agent: "a", Workspace: "ws-" + strconv.Itoa(i)}, "job")
		if !d.Allowed() {
			t.Fatalf("workspace %d refused on its first call", i)
		}
		rel()
	}
	if n := st.Keys(); n != 1000 {
		t.Fatalf("100,000 workspaces tracked as %d keys, want max_keys 1000", n)
	}
	// Concurrency keys are bounded too: with 1000 in flight a new key is refused.
	st2 := memState(t, 10)
	l2, _ := newLimiter(t, st2, "", mustConc(t, 1, "*"))
	for i := range 10 {
		if d, _ := l2.Admit(ctx, Key{Workspace: strconv.Itoa(i)}, "job"); !d.Allowed() {
			t.Fatal("refused below max_keys")
		}
	}
	if d, _ := l2.Admit(ctx, Key{Workspace: "new"}, "job"); d.Allowed() || d.Code() != CodeConcurrencyLimited {
		t.Fatalf("an 11th key in flight over max_keys 10: %+v", d)
	}
}

func TestRulesRefuseBadValues(t *testing.T) {
	for _, c := range []struct {
		rate  string
		burst int
	}{{"0/m", 0}, {"10", 0}, {"10/d", 0}, {"-1/s", 0}, {"x/s", 0}, {"10/s", -1}, {"2000000/s", 0}, {"10/s", 2_000_000}} {
		if _, err := NewRateRule([]string{"job.start"}, c.rate, c.burst); err == nil {
			t.Errorf("rate %q burst %d accepted", c.rate, c.burst)
		}
	}
	if _, err := NewRateRule(nil, "1/s", 0); err == nil {
		t.Error("a rate rule without patterns accepted")
	}
	if _, err := NewRateRule([]string{"job.st*"}, "1/s", 0); err == nil {
		t.Error("a bad pattern accepted")
	}
	for _, n := range []int{0, -1, MaxConcurrency + 1} {
		if _, err := NewConcurrencyRule([]string{"*"}, n); err == nil {
			t.Errorf("concurrency %d accepted", n)
		}
	}
	if _, err := NewState(-1, nil); err == nil {
		t.Error("max_keys -1 accepted")
	}
	if _, err := NewLimiter(memState(t, 0), nil, "maybe", Observer{}); err == nil {
		t.Error("on_store_error maybe accepted")
	}
}

func redisState(t *testing.T, url string) *State {
	t.Helper()
	st, err := NewState(0, &RedisOptions{URL: url, KeyPrefix: "test:" + t.Name() + ":"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Destruct() })
	return st
}

func TestRedisSharesOneBudget(t *testing.T) {
	srv := redistest.Start(t)
	rule := mustRate(t, "5/m", 0, "job.start")
	one, _ := newLimiter(t, redisState(t, srv.URL()), "", rule)
	two, _ := newLimiter(t, redisState(t, srv.URL()), "", rule)
	one.now, two.now = time.Now, time.Now
	ctx := context.Background()
	allowed := 0
	for i := range 10 {
		l := one
		if i%2 == 1 {
			l = two
		}
		if d, _ := l.Admit(ctx, wsA, "job.start"); d.Allowed() {
			allowed++
		} else if d.Code() != CodeRateLimited || d.Fallback {
			t.Fatalf("refusal %+v", d)
		}
	}
	if allowed != 5 {
		t.Fatalf("two states sharing Redis allowed %d of 10 calls, want 5 (one budget)", allowed)
	}
	if d, _ := one.Admit(ctx, wsB, "job.start"); !d.Allowed() {
		t.Error("B refused in Redis")
	}
}

func TestRedisDownFollowsOnStoreError(t *testing.T) {
	srv := redistest.Start(t)
	rule := mustRate(t, "2/h", 0, "job.start")
	st := redisState(t, srv.URL())
	var storeErrs []string
	local, _ := NewLimiter(st, []*Rule{rule}, "", Observer{StoreError: func(_ error, fb string) { storeErrs = append(storeErrs, fb) }})
	deny, _ := NewLimiter(st, []*Rule{rule}, OnStoreErrorDeny, Observer{})
	ctx := context.Background()
	if d, _ := local.Admit(ctx, wsA, "job.start"); !d.Allowed() || d.Fallback {
		t.Fatalf("with Redis up: %+v", d)
	}
	srv.Stop()
	d, _ := local.Admit(ctx, wsA, "job.start")
	if !d.Allowed() || !d.Fallback {
		t.Fatalf("on_store_error local with Redis down: %+v, want allowed from the local bucket", d)
	}
	if len(storeErrs) != 1 || storeErrs[0] != "local" {
		t.Errorf("store errors told: %v", storeErrs)
	}
	if h := st.Health(); !h.Down || h.LastError == "" {
		t.Errorf("health %+v, want down with an error", h)
	}
	local.Admit(ctx, wsA, "job.start")
	if d, _ := local.Admit(ctx, wsA, "job.start"); d.Allowed() {
		t.Error("the local fallback bucket does not limit")
	}
	d, _ = deny.Admit(ctx, wsB, "job.start")
	if d.Allowed() || d.Code() != CodeRateLimited || d.RetryAfterSeconds() != 1 {
		t.Fatalf("on_store_error deny with Redis down: %+v, want rate_limited, retry 1 s", d)
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, _ := local.Admit(ctx, wsB, "job.start")
		if d.Allowed() && !d.Fallback {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis back, still %+v", d)
		}
		time.Sleep(50 * time.Millisecond) // polling the store's recovery, not an assertion delay
	}
	if st.Health().Down {
		t.Error("health still down after a good call")
	}
}

func TestRedisCallerGoneIsNotAStoreError(t *testing.T) {
	srv := redistest.Start(t)
	st := redisState(t, srv.URL())
	l, _ := newLimiter(t, st, "", mustRate(t, "5/m", 0, "*"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, _ := l.Admit(ctx, wsA, "job"); d.Allowed() {
		t.Fatal("a call whose client left was allowed without asking the store")
	}
	if st.Health().Down {
		t.Fatal("a cancelled caller marked the store down")
	}
}
