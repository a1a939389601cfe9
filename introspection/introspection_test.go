package introspection

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := []struct {
		body   string
		active bool
	}{
		{`{"active":true}`, true},
		{`{"active":false}`, false},
		{` {"active" : true, "grant_id":"g", "workspace_id":null, "scope":"a b", "exp": 1, "extra":{"x":[1]}} `, true},
	}
	for _, g := range good {
		a, err := parse([]byte(g.body))
		if err != nil || a.active != g.active {
			t.Errorf("%s: %+v %v", g.body, a, err)
		}
	}
	for _, bad := range []string{``, `null`, `[]`, `{"active":"true"}`, `{"active":1}`, `{}`, `{"active":null}`,
		`{"active":true,"active":false}`, `{"active":true} x`, `{"active":true,"scope":["a"]}`, `{"active":true,"grant_id":{}}`} {
		if _, err := parse([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestVerdict(t *testing.T) {
	s := func(v string) *string { return &v }
	want := Expect{GrantID: "g", WorkspaceID: "w", Scopes: []string{"b", "a"}}
	for _, c := range []struct {
		a    answer
		want Result
	}{
		{answer{active: true}, Active},
		{answer{active: true, grantID: s("g"), workspaceID: s("w"), scope: s("a  b a")}, Active},
		{answer{active: false, grantID: s("g")}, Inactive},
		{answer{active: true, grantID: s("h")}, Mismatch},
		{answer{active: true, workspaceID: s("x")}, Mismatch},
		{answer{active: true, scope: s("a")}, Mismatch},
		{answer{active: true, scope: s("a b c")}, Mismatch},
	} {
		if got := c.a.verdict(want); got != c.want {
			t.Errorf("%+v: %v, want %v", c.a, got, c.want)
		}
	}
}

// TestCheckCacheAndErrors: cache lifetimes on a controlled clock, the
// timeout, a non-200 and a redirect, and that errors name neither the
// token nor the secret.
func TestCheckCacheAndErrors(t *testing.T) {
	var calls atomic.Int64
	var answer atomic.Value
	answer.Store(`{"active":true}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.ReadAll(r.Body) // then the server notices the client going away
		switch body := answer.Load().(string); body {
		case "slow":
			<-r.Context().Done()
		case "redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "500":
			w.WriteHeader(500)
		default:
			w.Write([]byte(body))
		}
	}))
	defer srv.Close()
	now := time.Unix(1_000_000, 0)
	c, err := New(Config{URL: srv.URL, ClientID: "id", ClientSecret: "the-secret", Timeout: time.Second, // long enough for the slow call to reach the server on a loaded machine
		CacheTTL: 10 * time.Second, NegativeCacheTTL: 2 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exp := Expect{ExpiresAt: now.Add(5 * time.Second)}
	check := func(wantRes Result, wantSrc string) {
		t.Helper()
		v, err := c.Check(ctx, "tok.en.x", exp)
		if err != nil || v.Result != wantRes || v.Source != wantSrc {
			t.Fatalf("check: %+v %v, want %v from %s", v, err, wantRes, wantSrc)
		}
	}
	check(Active, "miss")
	check(Active, "hit")
	now = now.Add(5 * time.Second) // the token's exp comes before cache_ttl
	check(Active, "miss")
	answer.Store(`{"active":false}`)
	now = now.Add(11 * time.Second)
	check(Inactive, "miss")
	now = now.Add(time.Second)
	check(Inactive, "hit")
	now = now.Add(1500 * time.Millisecond)
	for _, mode := range []string{"slow", "redirect", "500", `{"active":"yes"}`} {
		answer.Store(mode)
		_, err := c.Check(ctx, "tok.en.x", exp)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: %v", mode, err)
		}
		if strings.Contains(err.Error(), "tok.en.x") || strings.Contains(err.Error(), "the-secret") {
			t.Fatalf("error names a secret: %v", err)
		}
	}
	if h := c.Health(); h.ConsecutiveFailures != 4 || h.LastError == "" {
		t.Fatalf("health %+v", h)
	}
	if calls.Load() != 7 {
		t.Fatalf("%d calls, want 7 (failures are not cached)", calls.Load())
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("no url accepted")
	}
	if _, err := New(Config{URL: "http://x", Timeout: -1}); err == nil {
		t.Fatal("negative timeout accepted")
	}
}
