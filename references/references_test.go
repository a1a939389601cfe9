package references_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/redisclient"
	"github.com/supervaize/supervaizer-sidecar/references"
	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

var ctx = context.Background()

func job(v string) references.Ref { return references.Ref{Kind: references.KindJob, Value: v} }

// eachStore runs test on a fresh memory, file and Redis store bounded by l.
func eachStore(t *testing.T, l references.Limits, test func(t *testing.T, s references.Store)) {
	t.Run("memory", func(t *testing.T) { test(t, references.NewMemoryStore(l)) })
	t.Run("file", func(t *testing.T) {
		s, err := references.NewFileStore(filepath.Join(t.TempDir(), "refs.db"), l)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		test(t, s)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		c, _, err := redisclient.New("references", redisclient.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		s := references.NewRedisStore(c, "test:refs:", l)
		t.Cleanup(func() { s.Close() })
		test(t, s)
	})
}

func resolve(t *testing.T, s references.Store, ws string, bind bool, refs ...references.Ref) references.Result {
	t.Helper()
	r, err := s.Resolve(ctx, "agent", ws, refs, bind)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFirstUseWins: the first workspace to use a reference owns it; the
// other is refused (Foreign), with the index of the reference, and nothing
// of a refused call is bound.
func TestFirstUseWins(t *testing.T) {
	eachStore(t, references.Limits{}, func(t *testing.T, s references.Store) {
		if r := resolve(t, s, "A", true, job("j1")); r.Outcome != references.Allowed || r.Bound != 1 {
			t.Fatalf("A's first use: %+v", r)
		}
		if r := resolve(t, s, "A", true, job("j1")); r.Outcome != references.Allowed || r.Bound != 0 {
			t.Fatalf("A's second use: %+v", r)
		}
		if r := resolve(t, s, "B", true, job("j2"), job("j1")); r.Outcome != references.Foreign || r.Index != 1 {
			t.Fatalf("B with A's job: %+v", r)
		}
		// j2 was not bound by the refused call: A can take it.
		if r := resolve(t, s, "A", true, job("j2")); r.Outcome != references.Allowed || r.Bound != 1 {
			t.Fatalf("j2 after B's refused call: %+v", r)
		}
		// The same value of another kind, or of another agent, is another reference.
		if r := resolve(t, s, "B", true, references.Ref{Kind: references.KindCase, Value: "j1"}); r.Outcome != references.Allowed {
			t.Fatalf("case j1: %+v", r)
		}
		if r, _ := s.Resolve(ctx, "other-agent", "B", []references.Ref{job("j1")}, true); r.Outcome != references.Allowed {
			t.Fatalf("another agent's j1: %+v", r)
		}
	})
}

// TestUnknownDeny: under deny an unbound reference is refused like a
// foreign one, except a creator's.
func TestUnknownDeny(t *testing.T) {
	eachStore(t, references.Limits{}, func(t *testing.T, s references.Store) {
		if r := resolve(t, s, "A", false, job("j1")); r.Outcome != references.Unknown || r.Index != 0 {
			t.Fatalf("unknown under deny: %+v", r)
		}
		c := job("j1")
		c.Create = true
		if r := resolve(t, s, "A", false, c); r.Outcome != references.Allowed || r.Bound != 1 {
			t.Fatalf("creator under deny: %+v", r)
		}
		if r := resolve(t, s, "A", false, job("j1")); r.Outcome != references.Allowed {
			t.Fatalf("A's own under deny: %+v", r)
		}
		if r := resolve(t, s, "B", false, c); r.Outcome != references.Foreign {
			t.Fatalf("B creating A's job: %+v", r)
		}
	})
}

// TestLearn binds what nobody holds, renews the workspace's own, and
// leaves another's.
func TestLearn(t *testing.T) {
	eachStore(t, references.Limits{}, func(t *testing.T, s references.Store) {
		resolve(t, s, "B", true, job("b1"))
		l, err := s.Learn(ctx, "agent", "A", []references.Ref{job("a1"), job("b1"), job("a1")})
		if err != nil {
			t.Fatal(err)
		}
		if l.Bound != 1 || l.Own != 1 || l.Foreign != 1 {
			t.Fatalf("learned %+v", l)
		}
		if r := resolve(t, s, "B", true, job("a1")); r.Outcome != references.Foreign {
			t.Fatalf("B with a learned job of A: %+v", r)
		}
		// b1, which B used first, was named by the agent for A: neither may
		// use it now (B cannot act on what the agent made A's).
		for _, ws := range []string{"A", "B", "C"} {
			if r := resolve(t, s, ws, true, job("b1")); r.Outcome != references.Foreign {
				t.Fatalf("%s with a conflicted job: %+v", ws, r)
			}
		}
		if l, err := s.Learn(ctx, "agent", "B", []references.Ref{job("b1")}); err != nil || l.Foreign != 1 {
			t.Fatalf("learning a conflicted job again: %+v %v", l, err)
		}
	})
}

// TestOwnLRUFirst: a workspace at max_per_workspace loses its own least
// recently used binding, never another workspace's.
func TestOwnLRUFirst(t *testing.T) {
	eachStore(t, references.Limits{MaxPerWorkspace: 3}, func(t *testing.T, s references.Store) {
		resolve(t, s, "B", true, job("b1"))
		for i := range 3 {
			resolve(t, s, "A", true, job(fmt.Sprint("a", i)))
		}
		resolve(t, s, "A", true, job("a0")) // a1 is now A's least recently used
		resolve(t, s, "A", true, job("a3"))
		if r := resolve(t, s, "C", true, job("a1")); r.Outcome != references.Allowed {
			t.Fatalf("a1 should have been A's one to go: %+v", r)
		}
		for _, v := range []string{"a0", "a2", "a3"} {
			if r := resolve(t, s, "C", true, job(v)); r.Outcome != references.Foreign {
				t.Fatalf("%s is A's: %+v", v, r)
			}
		}
		if r := resolve(t, s, "C", true, job("b1")); r.Outcome != references.Foreign {
			t.Fatalf("B's binding went: %+v", r)
		}
	})
}

// TestTTL: a binding expires TTL after its last use.
func TestTTL(t *testing.T) {
	eachStore(t, references.Limits{TTL: 300 * time.Millisecond}, func(t *testing.T, s references.Store) {
		resolve(t, s, "A", true, job("j1"))
		deadline := time.Now().Add(5 * time.Second)
		for resolve(t, s, "B", true, job("j1")).Outcome == references.Foreign {
			if time.Now().After(deadline) {
				t.Fatal("the binding never expired")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestMemoryBounded: 100,000 distinct references keep the store within
// its bounds: the workspace's own (max_per_workspace), and in all.
func TestMemoryBounded(t *testing.T) {
	s := references.NewMemoryStore(references.Limits{MaxPerWorkspace: 1000})
	for i := range 100_000 {
		ws := "A"
		if i%2 == 1 {
			ws = fmt.Sprint("W", i%200) // 100 other workspaces
		}
		if _, err := s.Resolve(ctx, "agent", ws, []references.Ref{job(fmt.Sprint("j", i))}, true); err != nil && err != references.ErrFull {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n > references.DefaultMaxEntries {
		t.Fatalf("%d bindings held, more than the total bound", n)
	}
	// A alone: at most its bound.
	a := references.NewMemoryStore(references.Limits{MaxPerWorkspace: 1000})
	for i := range 100_000 {
		if _, err := a.Resolve(ctx, "agent", "A", []references.Ref{job(fmt.Sprint("j", i))}, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.Len(); n != 1000 {
		t.Fatalf("one workspace holds %d bindings, not its bound 1000", n)
	}
}

// TestDefaultTotalBound: at the defaults the memory and file stores hold
// at most DefaultMaxEntries bindings in all, whose memory
// (BytesPerBinding each) fits the k8s base's container next to its other
// budgets (docs/workspaces.md, "Sizing"); a workspace's default share is
// an eighth of it; past the total a new binding is ErrFull.
func TestDefaultTotalBound(t *testing.T) {
	l := references.Limits{}.Resolved()
	if l.MaxEntries != references.DefaultMaxEntries || l.MaxPerWorkspace != references.DefaultMaxEntries/8 {
		t.Fatalf("defaults %+v", l)
	}
	if mem := l.MaxEntries * references.BytesPerBinding; mem > 48<<20 {
		t.Fatalf("the default total bound takes %d MiB, more than the 48 MiB the 256 MiB container leaves it", mem>>20)
	}
	if l := (references.Limits{MaxEntries: 4}).Resolved(); l.MaxPerWorkspace != 1 {
		t.Fatalf("share of 4: %d, want 1", l.MaxPerWorkspace)
	}
	if l := (references.Limits{MaxEntries: 10, MaxPerWorkspace: 20}).Resolved(); l.MaxPerWorkspace != 10 {
		t.Fatalf("max_per_workspace over max_entries: %d, want 10", l.MaxPerWorkspace)
	}
	s := references.NewMemoryStore(references.Limits{})
	full := 0
	for i := range references.DefaultMaxEntries + 100 {
		ws := fmt.Sprint("W", i%200) // 200 workspaces, each under its share
		switch _, err := s.Resolve(ctx, "agent", ws, []references.Ref{job(fmt.Sprint("j", i))}, true); err {
		case nil:
		case references.ErrFull:
			full++
		default:
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != references.DefaultMaxEntries || full != 100 {
		t.Fatalf("%d bindings held, %d refused full; want %d and 100", n, full, references.DefaultMaxEntries)
	}
}

// TestFileLoadBounded: a file holding more bindings than the bounds in
// effect (written under larger ones) is read back to at most max_entries,
// the most recently used, within each workspace's bound; the rest is
// deleted from the file.
func TestFileLoadBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "refs.db")
	big := references.Limits{MaxEntries: 1000, MaxPerWorkspace: 1000}
	s, err := references.NewFileStore(path, big)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		resolve(t, s, fmt.Sprint("W", i%3), true, job(fmt.Sprint("j", i)))
	}
	s.Close()
	s, err = references.NewFileStore(path, references.Limits{MaxEntries: 100, MaxPerWorkspace: 40})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 100 {
		t.Fatalf("%d bindings read back, want max_entries 100", n)
	}
	for i := range 300 { // the 100 most recent are still bound, to their workspace
		r := resolve(t, s, "B", false, job(fmt.Sprint("j", i)))
		if want := map[bool]references.Outcome{true: references.Foreign, false: references.Unknown}[i >= 200]; r.Outcome != want {
			t.Fatalf("j%d after a bounded reopen: %+v, want %v", i, r, want)
		}
	}
	s.Close()
	s, err = references.NewFileStore(path, big) // the rest was deleted from the file
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 100 {
		t.Fatalf("%d bindings in the file after a bounded reopen, want 100", n)
	}
	s.Close()
	s, err = references.NewFileStore(path, references.Limits{MaxEntries: 1000, MaxPerWorkspace: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := s.Len(); n != 30 {
		t.Fatalf("%d bindings read back at 10 per workspace (3 workspaces), want 30", n)
	}
}

// TestFileSurvivesReopen: the file store's bindings are read back.
func TestFileSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "refs.db")
	s, err := references.NewFileStore(path, references.Limits{MaxPerWorkspace: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a1", "a2", "a3"} { // a1 goes: A's bound is 2
		resolve(t, s, "A", true, job(v))
	}
	s.Close()
	s, err = references.NewFileStore(path, references.Limits{MaxPerWorkspace: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Len() != 2 {
		t.Fatalf("%d bindings read back, want 2", s.Len())
	}
	for v, want := range map[string]references.Outcome{"a1": references.Allowed, "a2": references.Foreign, "a3": references.Foreign} {
		if r := resolve(t, s, "B", false, job(v)); r.Outcome != want && !(want == references.Allowed && r.Outcome == references.Unknown) {
			t.Fatalf("%s after reopen: %+v", v, r)
		}
	}
	if _, err := references.NewFileStore(path, references.Limits{}); err == nil {
		t.Fatal("a second open of a locked file succeeded")
	}
}

// TestRedisCluster: on a Redis Cluster the script runs on the node of the
// agent's hash slot (every key of one agent carries the {agent} tag):
// first use wins, and a workspace's own least recently used binding goes
// first (the eviction reads the keys the set names).
func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c, _, err := redisclient.New("references", redisclient.Options{Mode: redisclient.ModeCluster, URL: cl.URL()})
	if err != nil {
		t.Fatal(err)
	}
	s := references.NewRedisStore(c, "test:refs:", references.Limits{MaxPerWorkspace: 2})
	defer s.Close()
	for _, agent := range []string{"agent-1", "agent-2", "agent-3"} { // three slots
		for _, v := range []string{"a1", "a2", "a3"} {
			if r, err := s.Resolve(ctx, agent, "A", []references.Ref{job(v)}, true); err != nil || r.Outcome != references.Allowed {
				t.Fatalf("%s %s: %+v %v", agent, v, r, err)
			}
		}
		for v, want := range map[string]references.Outcome{"a1": references.Allowed, "a2": references.Foreign, "a3": references.Foreign} {
			if r, err := s.Resolve(ctx, agent, "B", []references.Ref{job(v)}, true); err != nil || r.Outcome != want {
				t.Fatalf("%s: B with %s: %+v %v, want %v", agent, v, r, err, want)
			}
		}
	}
}
