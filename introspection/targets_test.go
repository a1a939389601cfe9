package introspection

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// TestCovers: the default targets are the seed's high-risk operations; a
// configured list replaces them; "*" is one segment.
func TestCovers(t *testing.T) {
	def, err := New(Config{URL: "http://x"})
	if err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]bool{
		"job.start": true, "resource.leads.import": true, "resource.leads.delete": true,
		"dataset.sales.query": true, "artifact.get": true,
		"job.stop": false, "resource.leads.list": false, "dataset.query": false, "surface:job.start": false, "home": false,
		"job.start.form": false, "job": false, "resource..create": false, "resource.a.b.create": false, "": false, "job.start.": false,
	} {
		if got := def.Covers(target); got != want {
			t.Errorf("default Covers(%q) = %v, want %v", target, got, want)
		}
	}
	own, err := New(Config{URL: "http://x", Actions: []string{"job.stop", "dashboard.*"}})
	if err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]bool{"job.stop": true, "dashboard.main": true, "job.start": false, "dashboard.a.b": false} {
		if got := own.Covers(target); got != want {
			t.Errorf("configured Covers(%q) = %v, want %v", target, got, want)
		}
	}
	d := DefaultActions()
	d[0] = "changed"
	if !slices.Contains(DefaultActions(), "job.start") {
		t.Error("DefaultActions shares its slice")
	}
}

// TestActionsRefused: a malformed or namespaced pattern refuses the
// Client, the error naming introspection and the pattern.
func TestActionsRefused(t *testing.T) {
	for actions, want := range map[string]string{
		"job..start":        `introspection: bad target pattern "job..start"`,
		"job.st*":           `introspection: bad target pattern "job.st*"`,
		"surface:job.start": `introspection actions: "surface:job.start": a namespace is a limits target only; write the action or surface id`,
	} {
		_, err := New(Config{URL: "http://x", Actions: []string{"job.start", actions}})
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", actions, err, want)
		}
	}
}

// TestRedirectNotFollowed: an endpoint answering a redirect to another
// server is a failed call (ErrUnavailable: fail closed), and the other
// server never sees the token.
func TestRedirectNotFollowed(t *testing.T) {
	var elsewhereHits atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereHits.Add(1)
		w.Write([]byte(`{"active":true}`))
	}))
	defer elsewhere.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/introspect", http.StatusTemporaryRedirect) // 307 keeps the POST and its body
	}))
	defer redirecting.Close()
	c, err := New(Config{URL: redirecting.URL, Bearer: "b"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Check(context.Background(), "tok.en.x", Expect{})
	if !errors.Is(err, ErrUnavailable) || v.Result == Active {
		t.Errorf("redirected check: %+v %v, want ErrUnavailable", v, err)
	}
	if n := elsewhereHits.Load(); n != 0 {
		t.Fatalf("the redirect target was called %d times, want 0", n)
	}
}
