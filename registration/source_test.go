package registration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

const cardPath = "/.well-known/agents/agent_interviewer_agent.json"

// cardServer is a stand-in agent on loopback serving one Agent Card. With no
// card it answers 503, like an agent that is still starting.
type cardServer struct {
	*httptest.Server
	card     atomic.Pointer[[]byte]
	override atomic.Pointer[http.HandlerFunc]
	hits     atomic.Int64
}

func newCardServer(t *testing.T) *cardServer {
	t.Helper()
	cs := &cardServer{}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.hits.Add(1)
		if h := cs.override.Load(); h != nil {
			(*h)(w, r)
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != cardPath {
			http.NotFound(w, r)
			return
		}
		b := cs.card.Load()
		if b == nil {
			http.Error(w, "agent starting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(*b)
	}))
	t.Cleanup(cs.Close)
	return cs
}

func (cs *cardServer) serve(card []byte) { cs.card.Store(&card) }

func (cs *cardServer) handle(h http.HandlerFunc) {
	if h == nil {
		cs.override.Store(nil)
		return
	}
	cs.override.Store(&h)
}

type changeEvent struct {
	slug         string
	change       Change
	oldFP, newFP string
}

// recorder collects callbacks without ever blocking the Source.
type recorder struct {
	fetches chan error
	changes chan changeEvent
}

func newRecorder() *recorder {
	return &recorder{fetches: make(chan error, 1024), changes: make(chan changeEvent, 1024)}
}

func (r *recorder) onFetch(_ string, err error) {
	select {
	case r.fetches <- err:
	default:
	}
}

func (r *recorder) onChange(slug string, c Change, oldFP, newFP string) {
	select {
	case r.changes <- changeEvent{slug, c, oldFP, newFP}:
	default:
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func noneQueued[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Errorf("unexpected %s: %+v", what, v)
	default:
	}
}

func fixtureCard(t *testing.T, f func(m map[string]any)) []byte {
	t.Helper()
	reg := fixtureRaw(t)
	if f != nil {
		reg = edited(t, reg, f)
	}
	return sdkCard(t, reg)
}

func newObservedLogger() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

func countLogs(logs *observer.ObservedLogs, level zapcore.Level, msg string) int {
	n := 0
	for _, e := range logs.All() {
		if e.Level == level && e.Message == msg {
			n++
		}
	}
	return n
}

func wantCode(t *testing.T, err error, code string) *refusal.Refusal {
	t.Helper()
	var e *refusal.Refusal
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("err = %v, want *refusal.Refusal with code %s", err, code)
	}
	return e
}

func TestUpstreamAgentDownThenUp(t *testing.T) {
	cs := newCardServer(t)
	logger, logs := newObservedLogger()
	rec := newRecorder()
	src, err := NewUpstreamSource(UpstreamOptions{
		BaseURL:         cs.URL,
		Slugs:           []string{fixtureSlug},
		RefreshInterval: 50 * time.Millisecond,
		InitialBackoff:  5 * time.Millisecond,
		Logger:          logger,
		OnFetch:         rec.onFetch,
		OnChange:        rec.onChange,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	// The agent is still starting: Start did not block, the fetch failed, and
	// there is no contract.
	if err := recv(t, rec.fetches, "first fetch"); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("first fetch error = %v, want HTTP 503", err)
	}
	_, err = src.Contract(fixtureSlug)
	e := wantCode(t, err, CodeAgentContractUnavailable)
	if !strings.Contains(e.Message, fixtureSlug) || strings.Contains(e.Message, cs.URL) {
		t.Errorf("unavailable message %q should name the agent and not the upstream address", e.Message)
	}
	if src.Ready() {
		t.Error("Ready before any card was read")
	}
	st := src.Status()[fixtureSlug]
	if st.Ready || st.Fingerprint != "" || !strings.Contains(st.LastError, "HTTP 503") || st.ConsecutiveFailures < 1 || st.LastErrorAt.IsZero() {
		t.Errorf("status while down = %+v", st)
	}

	// The agent comes up: the retry loop picks the card up by itself.
	cs.serve(fixtureCard(t, nil))
	eventually(t, "the contract to become available", src.Ready)
	c, err := src.Contract(fixtureSlug)
	if err != nil {
		t.Fatal(err)
	}
	want := mustParse(t, fixtureRaw(t)).Fingerprint()
	if c.Fingerprint() != want || !c.AllowsAction("job.start") || c.AllowsAction("job.cancel") {
		t.Errorf("contract fp %s allows job.start=%v", c.Fingerprint(), c.AllowsAction("job.start"))
	}
	ev := recv(t, rec.changes, "first load")
	if ev.slug != fixtureSlug || ev.oldFP != "" || ev.newFP != want || ev.change.Kind != ChangeInitial || len(ev.change.Differences) != 0 {
		t.Errorf("first load event = %+v", ev)
	}
	st = src.Status()[fixtureSlug]
	if !st.Ready || st.Fingerprint != want || st.LastError != "" || st.ConsecutiveFailures != 0 ||
		st.LastSuccess.IsZero() || st.LastChange == nil || st.LastChange.NewFingerprint != want || st.LastChange.OldFingerprint != "" ||
		st.LastChange.Kind != ChangeInitial || len(st.LastChange.Differences) != 0 {
		t.Errorf("status after recovery = %+v", st)
	}
	if n := countLogs(logs, zapcore.WarnLevel, "agent card refresh failed; no contract for this agent yet"); n != 1 {
		t.Errorf("failure warned %d times; repeated identical failures should log once at warn", n)
	}
	if countLogs(logs, zapcore.InfoLevel, "agent card refresh recovered") != 1 ||
		countLogs(logs, zapcore.InfoLevel, "agent contract loaded") != 1 {
		t.Errorf("missing recovery or load log: %v", logs.All())
	}
}

func TestUpstreamRefreshPicksUpNewAction(t *testing.T) {
	cs := newCardServer(t)
	cs.serve(fixtureCard(t, nil))
	logger, logs := newObservedLogger()
	rec := newRecorder()
	src, err := NewUpstreamSource(UpstreamOptions{
		BaseURL: cs.URL, Slugs: []string{fixtureSlug}, Logger: logger,
		OnChange: rec.onChange, OnFetch: rec.onFetch,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()

	if err := src.Refresh(ctx, fixtureSlug); err != nil {
		t.Fatal(err)
	}
	first, _ := src.Contract(fixtureSlug)
	recv(t, rec.changes, "first load")
	if first.AllowsAction("job.cancel") {
		t.Fatal("job.cancel allowed before the agent declared it")
	}

	// The agent adds an action at runtime.
	cs.serve(fixtureCard(t, func(m map[string]any) { appendAction(m, "job.cancel") }))
	if c, _ := src.Contract(fixtureSlug); c.AllowsAction("job.cancel") {
		t.Fatal("picked up without a refresh")
	}
	if err := src.Refresh(ctx, fixtureSlug); err != nil {
		t.Fatal(err)
	}
	second, _ := src.Contract(fixtureSlug)
	if !second.AllowsAction("job.cancel") {
		t.Fatal("new action not allowed after Refresh")
	}
	if first.AllowsAction("job.cancel") {
		t.Fatal("an installed Contract changed")
	}
	ev := recv(t, rec.changes, "change")
	if ev.change.Kind != ChangeExpanding || !slices.Equal(ev.change.Differences, []string{"action added: job.cancel"}) ||
		ev.oldFP != first.Fingerprint() || ev.newFP != second.Fingerprint() {
		t.Errorf("change event = %+v", ev)
	}
	if lc := src.Status()[fixtureSlug].LastChange; lc == nil || lc.Kind != ChangeExpanding || lc.OldFingerprint != first.Fingerprint() {
		t.Errorf("LastChange = %+v", lc)
	}
	warned := logs.FilterMessage("agent contract changed: expanding").All()
	if len(warned) != 1 || warned[0].Level != zapcore.WarnLevel {
		t.Fatalf("expanding change not logged once at warn: %v", logs.All())
	}
	if d, ok := warned[0].ContextMap()["differences"].([]any); !ok || fmt.Sprint(d) != "[action added: job.cancel]" {
		t.Errorf("logged differences = %v", warned[0].ContextMap()["differences"])
	}

	// Same card again: no change event.
	if err := src.Refresh(ctx, fixtureSlug); err != nil {
		t.Fatal(err)
	}
	noneQueued(t, rec.changes, "change event for an unchanged card")

	// A harmless change is logged at info.
	cs.serve(fixtureCard(t, func(m map[string]any) {
		appendAction(m, "job.cancel")
		sub(m, "versions")["a2ui_catalog_version"] = "supervaizer-v2-mvp.1"
	}))
	if err := src.Refresh(ctx, fixtureSlug); err != nil {
		t.Fatal(err)
	}
	if ev := recv(t, rec.changes, "harmless change"); ev.change.Kind != ChangeHarmless {
		t.Errorf("kind = %s", ev.change.Kind)
	}
	if countLogs(logs, zapcore.InfoLevel, "agent contract changed") != 1 {
		t.Errorf("harmless change not logged at info: %v", logs.All())
	}
}

func TestUpstreamSlugMismatchKeepsContract(t *testing.T) {
	cs := newCardServer(t)
	cs.serve(fixtureCard(t, nil))
	logger, logs := newObservedLogger()
	src, err := NewUpstreamSource(UpstreamOptions{BaseURL: cs.URL, Slugs: []string{fixtureSlug}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	if err := src.Refresh(ctx, fixtureSlug); err != nil {
		t.Fatal(err)
	}
	good, _ := src.Contract(fixtureSlug)

	cs.serve(fixtureCard(t, func(m map[string]any) {
		sub(m, "agent")["slug"] = "other_agent"
		appendAction(m, "job.cancel")
	}))
	err = src.Refresh(ctx, fixtureSlug)
	e := wantCode(t, err, CodeAgentSlugMismatch)
	if !strings.Contains(e.Message, `"agent_interviewer"`) || !strings.Contains(e.Message, `"other_agent"`) {
		t.Errorf("mismatch message %q should name both slugs", e.Message)
	}
	c, err := src.Contract(fixtureSlug)
	if err != nil || c != good || c.AllowsAction("job.cancel") {
		t.Fatalf("previous contract not kept: %v", err)
	}
	st := src.Status()[fixtureSlug]
	if !st.Ready || st.Fingerprint != good.Fingerprint() || !strings.Contains(st.LastError, "agent_slug_mismatch") || st.ConsecutiveFailures != 1 {
		t.Errorf("status = %+v", st)
	}
	kept := logs.FilterMessage("agent card refresh failed; keeping the last good contract").All()
	if len(kept) != 1 || kept[0].ContextMap()["kept_fingerprint"] != good.Fingerprint() || kept[0].ContextMap()["code"] != CodeAgentSlugMismatch {
		t.Errorf("failure log = %v", logs.All())
	}
}

// Any failed refresh keeps the last good contract.
func TestUpstreamFailuresKeepContract(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, cs *cardServer)
		want  string // substring of the error
		code  string // *refusal.Refusal code, when typed
	}{
		{"agent down", func(t *testing.T, cs *cardServer) { cs.card.Store(nil) }, "HTTP 503", ""},
		{"not found", func(t *testing.T, cs *cardServer) {
			cs.handle(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
		}, "HTTP 404", ""},
		{"redirect not followed", func(t *testing.T, cs *cardServer) {
			cs.handle(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/elsewhere", http.StatusFound)
			})
		}, "HTTP 302", ""},
		{"not JSON", func(t *testing.T, cs *cardServer) { cs.serve([]byte("<html>oops</html>")) }, "invalid JSON", ""},
		{"no extension", func(t *testing.T, cs *cardServer) { cs.serve([]byte(`{"name": "x"}`)) }, "no supervaizer.v2 extension", ""},
		{"too large", func(t *testing.T, cs *cardServer) {
			cs.serve(fixtureCard(t, func(m map[string]any) { m["padding"] = strings.Repeat("x", 1<<20) }))
		}, "larger than 1048576 bytes", ""},
		{"unsupported a2a version", func(t *testing.T, cs *cardServer) {
			cs.serve(fixtureCard(t, func(m map[string]any) { sub(m, "versions")["a2a_version"] = "0.3.0" }))
		}, `a2a_version "0.3.0"`, CodeContractVersionUnsupported},
		{"wrong type", func(t *testing.T, cs *cardServer) {
			cs.serve(fixtureCard(t, func(m map[string]any) { sub(m, "capabilities")["actions"] = "job.start" }))
		}, `"supervaizer.v2.capabilities.actions"`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := newCardServer(t)
			cs.serve(fixtureCard(t, nil))
			src, err := NewUpstreamSource(UpstreamOptions{BaseURL: cs.URL, Slugs: []string{fixtureSlug}})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if err := src.Refresh(context.Background(), fixtureSlug); err != nil {
				t.Fatal(err)
			}
			good, _ := src.Contract(fixtureSlug)
			tc.setup(t, cs)
			err = src.Refresh(context.Background(), fixtureSlug)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Refresh error = %v, want it to contain %q", err, tc.want)
			}
			if tc.code != "" {
				wantCode(t, err, tc.code)
			}
			if tc.code == CodeContractVersionUnsupported {
				// A version the sidecar does not accept is refused
				// explicitly: the agent's calls fail with it, the older
				// contract is not used.
				_, err := src.Contract(fixtureSlug)
				wantCode(t, err, CodeContractVersionUnsupported)
				cs.serve(fixtureCard(t, nil))
				if err := src.Refresh(context.Background(), fixtureSlug); err != nil {
					t.Fatal(err)
				}
				if _, err := src.Contract(fixtureSlug); err != nil {
					t.Fatalf("supported card again: %v", err)
				}
				return
			}
			if c, err := src.Contract(fixtureSlug); err != nil || c != good {
				t.Fatalf("previous contract not kept: %v", err)
			}
			if st := src.Status()[fixtureSlug]; !st.Ready || st.LastError == "" {
				t.Errorf("status = %+v", st)
			}
		})
	}
}

// TestUpstreamRedirectToAnotherHostNotFollowed: an agent answering its
// card's GET with a redirect to another server gets a failed fetch (HTTP
// 302, no contract), and the other server, which serves a valid card, is
// never asked: the contract comes from the configured upstream only.
func TestUpstreamRedirectToAnotherHostNotFollowed(t *testing.T) {
	elsewhere := newCardServer(t)
	elsewhere.serve(fixtureCard(t, nil))
	cs := newCardServer(t)
	cs.handle(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+cardPath, http.StatusFound)
	})
	src, err := NewUpstreamSource(UpstreamOptions{BaseURL: cs.URL, Slugs: []string{fixtureSlug}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.Refresh(context.Background(), fixtureSlug); err == nil || !strings.Contains(err.Error(), "HTTP 302") {
		t.Fatalf("Refresh error = %v, want HTTP 302", err)
	}
	if _, err := src.Contract(fixtureSlug); err == nil {
		t.Fatal("a contract was installed from a redirect")
	}
	if n := elsewhere.hits.Load(); n != 0 {
		t.Fatalf("the redirect target was asked %d times, want 0", n)
	}
}

func TestUpstreamBaseURLPrefix(t *testing.T) {
	var gotPath atomic.Value
	card := fixtureCard(t, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath.Store(r.URL.Path)
		if r.URL.Path != "/agents-upstream"+cardPath || r.Header.Get("Accept") != "application/json" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(card)
	}))
	defer srv.Close()
	src, err := NewUpstreamSource(UpstreamOptions{BaseURL: srv.URL + "/agents-upstream/", Slugs: []string{fixtureSlug}})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Refresh(context.Background(), fixtureSlug); err != nil {
		t.Fatalf("Refresh: %v (path %v)", err, gotPath.Load())
	}
}

func TestUpstreamSecretsStayOutOfErrorsAndLogs(t *testing.T) {
	const secret = "s3cr3t-pass"
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // connection refused from now on
	cs := newCardServer(t)

	for name, base := range map[string]string{"refused": downURL, "503": cs.URL} {
		t.Run(name, func(t *testing.T) {
			logger, logs := newObservedLogger()
			withPass := strings.Replace(base, "http://", "http://user:"+secret+"@", 1)
			src, err := NewUpstreamSource(UpstreamOptions{BaseURL: withPass, Slugs: []string{fixtureSlug}, Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := src.Start(ctx); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a failed fetch", func() bool { return src.Status()[fixtureSlug].LastError != "" })
			src.Close()
			err = src.Refresh(context.Background(), fixtureSlug)
			if err == nil {
				t.Fatal("Refresh after Close succeeded")
			}
			texts := []string{src.Status()[fixtureSlug].LastError}
			for _, e := range logs.All() {
				texts = append(texts, e.Message, fmt.Sprint(e.ContextMap()))
			}
			for _, s := range texts {
				if strings.Contains(s, secret) {
					t.Errorf("secret leaked: %s", s)
				}
			}
			if len(logs.All()) < 2 {
				t.Errorf("expected start and failure logs, got %v", logs.All())
			}
		})
	}
}

// Readers never see a torn state while refreshes swap contracts underneath
// them (run with -race).
func TestUpstreamConcurrentRefreshAndReads(t *testing.T) {
	cardA := fixtureCard(t, nil)
	cardB := fixtureCard(t, func(m map[string]any) { appendAction(m, "job.cancel") })
	fpA := mustParse(t, fixtureRaw(t)).Fingerprint()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			_, _ = w.Write(cardB)
		} else {
			_, _ = w.Write(cardA)
		}
	}))
	defer srv.Close()
	var changes atomic.Int64
	src, err := NewUpstreamSource(UpstreamOptions{
		BaseURL: srv.URL, Slugs: []string{fixtureSlug},
		RefreshInterval: time.Millisecond, InitialBackoff: time.Millisecond,
		OnChange: func(string, Change, string, string) { changes.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err == nil {
		t.Error("second Start accepted")
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := src.Contract(fixtureSlug)
				if err != nil {
					continue
				}
				if c.AllowsAction("job.cancel") == (c.Fingerprint() == fpA) {
					t.Error("contract answers do not match its fingerprint")
					return
				}
				_ = src.Status()
				_ = src.Ready()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			_ = src.Refresh(ctx, fixtureSlug)
		}
	}()
	eventually(t, "several contract swaps", func() bool { return changes.Load() >= 10 })
	close(stop)
	wg.Wait()
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal("second Close failed")
	}
	if err := src.Start(context.Background()); err == nil {
		t.Error("Start after Close accepted")
	}
	if _, err := src.Contract(fixtureSlug); err != nil {
		t.Errorf("Contract after Close: %v", err)
	}
}

func TestSourceConfiguration(t *testing.T) {
	bad := []struct {
		name string
		opts UpstreamOptions
		want string
	}{
		{"no scheme", UpstreamOptions{BaseURL: "127.0.0.1:8000", Slugs: []string{"a"}}, "http"},
		{"ftp", UpstreamOptions{BaseURL: "ftp://127.0.0.1", Slugs: []string{"a"}}, "http"},
		{"query", UpstreamOptions{BaseURL: "http://127.0.0.1:8000/?x=1", Slugs: []string{"a"}}, "query"},
		{"no slugs", UpstreamOptions{BaseURL: "http://127.0.0.1:8000"}, "slug"},
		{"empty slug", UpstreamOptions{BaseURL: "http://127.0.0.1:8000", Slugs: []string{""}}, "empty"},
		{"slash in slug", UpstreamOptions{BaseURL: "http://127.0.0.1:8000", Slugs: []string{"a/b"}}, "'/'"},
		{"question mark in slug", UpstreamOptions{BaseURL: "http://127.0.0.1:8000", Slugs: []string{"a?b"}}, "path segment"},
		{"duplicate slug", UpstreamOptions{BaseURL: "http://127.0.0.1:8000", Slugs: []string{"a", "a"}}, "twice"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewUpstreamSource(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := NewFileSource("", []string{"a"}, FileOptions{}); err == nil {
		t.Error("empty file path accepted")
	}

	src, err := NewUpstreamSource(UpstreamOptions{BaseURL: "http://127.0.0.1:1", Slugs: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(src.Slugs(), []string{"a", "b"}) {
		t.Errorf("Slugs() = %v", src.Slugs())
	}
	_, err = src.Contract("zzz")
	if e := wantCode(t, err, CodeAgentContractUnavailable); !strings.Contains(e.Message, "not configured") {
		t.Errorf("message %q", e.Message)
	}
	wantCode(t, src.Refresh(context.Background(), "zzz"), CodeAgentContractUnavailable)
	if st := src.Status(); len(st) != 2 || st["a"].Ready || st["b"].Slug != "b" {
		t.Errorf("Status() = %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := src.Refresh(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Errorf("Refresh with a cancelled context = %v", err)
	}
	if st := src.Status()["a"]; st.ConsecutiveFailures != 0 {
		t.Errorf("a cancelled refresh counted as an agent failure: %+v", st)
	}
}

func writeFileAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestFileSourceShapes(t *testing.T) {
	dir := t.TempDir()
	reg := fixtureRaw(t)
	second := edited(t, reg, func(m map[string]any) { sub(m, "agent")["slug"] = "second_agent" })
	fp := mustParse(t, reg).Fingerprint()

	t.Run("bare registration", func(t *testing.T) {
		path := filepath.Join(dir, "registration.json")
		writeFileAtomic(t, path, reg)
		src, err := NewFileSource(path, []string{fixtureSlug, "second_agent"}, FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Refresh(context.Background(), fixtureSlug); err != nil {
			t.Fatal(err)
		}
		if c, err := src.Contract(fixtureSlug); err != nil || c.Fingerprint() != fp {
			t.Fatalf("Contract: %v", err)
		}
		// A single registration serves only the slug it declares.
		wantCode(t, src.Refresh(context.Background(), "second_agent"), CodeAgentSlugMismatch)
		if src.Ready() {
			t.Error("Ready with one slug unserved")
		}
	})

	t.Run("agent card", func(t *testing.T) {
		path := filepath.Join(dir, "card.json")
		writeFileAtomic(t, path, sdkCard(t, reg))
		src, err := NewFileSource(path, []string{fixtureSlug}, FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Refresh(context.Background(), fixtureSlug); err != nil {
			t.Fatal(err)
		}
		if c, _ := src.Contract(fixtureSlug); c == nil || c.Fingerprint() != fp || !src.Ready() {
			t.Fatal("card file not served")
		}
	})

	t.Run("map of slug to registration or card", func(t *testing.T) {
		path := filepath.Join(dir, "map.json")
		writeFileAtomic(t, path, encode(t, map[string]any{
			fixtureSlug:    decodeMap(t, reg),
			"second_agent": decodeMap(t, sdkCard(t, second)),
			"third_agent":  decodeMap(t, reg), // declares agent_interviewer
		}))
		src, err := NewFileSource(path, []string{fixtureSlug, "second_agent", "third_agent", "missing_agent"}, FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := src.Refresh(ctx, fixtureSlug); err != nil {
			t.Fatal(err)
		}
		if err := src.Refresh(ctx, "second_agent"); err != nil {
			t.Fatal(err)
		}
		if c, _ := src.Contract("second_agent"); c == nil || c.AgentSlug() != "second_agent" {
			t.Fatal("second_agent not served")
		}
		wantCode(t, src.Refresh(ctx, "third_agent"), CodeAgentSlugMismatch)
		err = src.Refresh(ctx, "missing_agent")
		if err == nil || !strings.Contains(err.Error(), `no entry for agent "missing_agent"`) {
			t.Errorf("missing entry error = %v", err)
		}
		if src.Ready() {
			t.Error("Ready with unserved slugs")
		}
	})
}

func TestFileSourceFollowsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agents.json")
	rec := newRecorder()
	src, err := NewFileSource(path, []string{fixtureSlug}, FileOptions{
		RefreshInterval: 20 * time.Millisecond, InitialBackoff: 5 * time.Millisecond,
		OnFetch: rec.onFetch, OnChange: rec.onChange,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	if err := recv(t, rec.fetches, "first read"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("first read error = %v, want not-exist", err)
	}
	wantCode(t, func() error { _, err := src.Contract(fixtureSlug); return err }(), CodeAgentContractUnavailable)

	writeFileAtomic(t, path, fixtureRaw(t))
	eventually(t, "the file to be read", src.Ready)

	writeFileAtomic(t, path, []byte(`{"not": "json"`))
	eventually(t, "the broken file to be reported", func() bool { return src.Status()[fixtureSlug].LastError != "" })
	if c, err := src.Contract(fixtureSlug); err != nil || c.AllowsAction("job.cancel") {
		t.Fatal("previous contract not kept after a broken file")
	}

	writeFileAtomic(t, path, edited(t, fixtureRaw(t), func(m map[string]any) { appendAction(m, "job.cancel") }))
	eventually(t, "the new action", func() bool {
		c, err := src.Contract(fixtureSlug)
		return err == nil && c.AllowsAction("job.cancel")
	})
	var kinds []ChangeKind
	for len(rec.changes) > 0 {
		kinds = append(kinds, (<-rec.changes).change.Kind)
	}
	if !slices.Equal(kinds, []ChangeKind{ChangeInitial, ChangeExpanding}) {
		t.Errorf("change kinds = %v, want first load then the added action", kinds)
	}
}
