package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// tenVerified is a header set shaped like the gate's for the bench token.
func tenVerified() http.Header {
	h := http.Header{}
	for _, n := range []string{"Mode", "Grant-Id", "Workspace-Id", "Workspace-Slug", "Agent-Id", "Agent-Slug",
		"Server-Id", "Scopes", "Agent-Workspace-Ref", "Token-Id"} {
		h[verifiedHeaderPrefix+n] = []string{strings.ToLower(n) + "-value"}
	}
	return h
}

// TestVerifiedSet: the ten verified headers are picked out of a received
// set (whatever the prefix's letter case), the rest left; any other count,
// or a header with two values, is an error.
func TestVerifiedSet(t *testing.T) {
	h := tenVerified()
	h["X-Api-Key"] = []string{"k"}
	h["X-Supervaize-Workspace-Authorization"] = []string{"Bearer t"}
	got, err := verifiedSet(h)
	if err != nil {
		t.Fatal(err)
	}
	if d := headerSetDiff(got, tenVerified()); len(d) > 0 {
		t.Fatalf("verifiedSet = %v, diff %v", got, d)
	}
	got["X-Supervaize-Verified-Mode"][0] = "changed"
	if h["X-Supervaize-Verified-Mode"][0] == "changed" {
		t.Error("verifiedSet shares the received values")
	}

	lower := tenVerified()
	delete(lower, "X-Supervaize-Verified-Token-Id")
	lower["x-supervaize-verified-token-id"] = []string{"jti"}
	if got, err := verifiedSet(lower); err != nil || len(got) != verifiedHeaderCount {
		t.Errorf("prefix in lower case: %v, %v", got, err)
	}

	nine := tenVerified()
	delete(nine, "X-Supervaize-Verified-Scopes")
	if _, err := verifiedSet(nine); err == nil {
		t.Error("nine verified headers accepted")
	}
	eleven := tenVerified()
	eleven["X-Supervaize-Verified-Context"] = []string{"x"}
	if _, err := verifiedSet(eleven); err == nil {
		t.Error("eleven verified headers accepted")
	}
	twice := tenVerified()
	twice["X-Supervaize-Verified-Mode"] = []string{"token", "token"}
	if _, err := verifiedSet(twice); err == nil {
		t.Error("a verified header with two values accepted")
	}
}

// TestHeaderSetDiff: equal sets give nothing; a changed value, a missing
// header and an extra one are each reported, by name in order; ignored
// names are skipped.
func TestHeaderSetDiff(t *testing.T) {
	a := http.Header{"A": {"1"}, "B": {"2"}, "X-Forwarded-Host": {"127.0.0.1:1"}}
	if d := headerSetDiff(a, a.Clone()); len(d) != 0 {
		t.Fatalf("equal sets: %v", d)
	}
	b := http.Header{"B": {"3"}, "C": {"4"}, "X-Forwarded-Host": {"127.0.0.1:2"}}
	d := headerSetDiff(a, b)
	var names []string
	for _, x := range d {
		n, _, _ := strings.Cut(x, ":")
		names = append(names, n)
	}
	if want := []string{"A", "B", "C", "X-Forwarded-Host"}; !slices.Equal(names, want) {
		t.Errorf("diff names %v, want %v (%v)", names, want, d)
	}
	if d := headerSetDiff(a, b, "A", "B", "C", "X-Forwarded-Host"); len(d) != 0 {
		t.Errorf("all ignored: %v", d)
	}
	if d := headerSetDiff(http.Header{"A": {"1", "2"}}, http.Header{"A": {"1"}}); len(d) != 1 {
		t.Errorf("a second value not reported: %v", d)
	}
}

// TestHeaderBytes: "Name: value\r\n" per value.
func TestHeaderBytes(t *testing.T) {
	h := http.Header{"Ab": {"xyz"}, "C": {"", "d"}}
	if got, want := headerBytes(h), (2+2+3+2)+(1+2+0+2)+(1+2+1+2); got != want {
		t.Errorf("headerBytes = %d, want %d", got, want)
	}
}

// TestCaptureHeaders: through the bench agent's capture endpoint, the
// load's own request of a scenario with headers (B-ctx's shape) reaches
// the agent with those headers, the key, the type and the token; the
// request after the capture is not captured.
func TestCaptureHeaders(t *testing.T) {
	srv := httptest.NewServer(upstreamHandler(time.Hour))
	defer srv.Close()
	e := &env{cfg: &config{}, upstreamAddr: strings.TrimPrefix(srv.URL, "http://")}
	s := scenario{name: "A", site: "A", body: []byte(`{}`), tokens: []string{"Bearer tok"}, headers: tenVerified(), check: forwardedOK}
	got, err := e.captureHeaders(s)
	if err != nil {
		t.Fatal(err)
	}
	set, err := verifiedSet(got)
	if err != nil {
		t.Fatal(err)
	}
	if d := headerSetDiff(set, tenVerified()); len(d) > 0 {
		t.Errorf("captured verified headers differ: %v", d)
	}
	for k, v := range map[string]string{"X-Api-Key": benchWriteKey, "Content-Type": "application/json",
		"X-Supervaize-Workspace-Authorization": "Bearer tok"} {
		if got.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, got.Get(k), v)
		}
	}

	// Disarmed after one request: a plain request does not replace it.
	client, tr := loadClient(1)
	defer tr.CloseIdleConnections()
	plain := s
	plain.headers = nil
	resp, err := client.Do(newLoadRun(client, e.url("A", "/a2a"), plain).request(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/_bench/capture")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var again http.Header
	if err := json.NewDecoder(resp.Body).Decode(&again); err != nil {
		t.Fatal(err)
	}
	if _, err := verifiedSet(again); err != nil {
		t.Errorf("the capture was replaced by a request after it: %v", err)
	}
}

// TestBCtxRequest: B-ctx's load request carries B's headers plus the ten,
// and B's request is unchanged (no verified header).
func TestBCtxRequest(t *testing.T) {
	e := &env{cfg: &config{}, upstreamAddr: "127.0.0.1:9", ports: map[string]int{siteB: 1}, bodySync: []byte(`{}`),
		tokenOne: "tok", ctxHeaders: tenVerified()}
	s := e.bctxScenario()
	if s.site != siteB || s.name != scenBCtx {
		t.Fatalf("B-ctx scenario: site %q name %q", s.site, s.name)
	}
	req := newLoadRun(http.DefaultClient, e.url(s.site, "/a2a"), s).request(t.Context())
	if len(req.Header) != 3+verifiedHeaderCount {
		t.Errorf("B-ctx request has %d headers: %v", len(req.Header), req.Header)
	}
	if d := headerSetDiff(mustVerifiedSet(t, req.Header), tenVerified()); len(d) > 0 {
		t.Errorf("B-ctx request: %v", d)
	}
	b := s
	b.headers = nil
	req = newLoadRun(http.DefaultClient, e.url(siteB, "/a2a"), b).request(t.Context())
	want := fmt.Sprint(http.Header{"X-Api-Key": {benchWriteKey}, "Content-Type": {"application/json"},
		"X-Supervaize-Workspace-Authorization": {"Bearer tok"}})
	if got := fmt.Sprint(req.Header); got != want {
		t.Errorf("B request headers %s, want %s", got, want)
	}
}

func mustVerifiedSet(t *testing.T, h http.Header) http.Header {
	t.Helper()
	set, err := verifiedSet(h)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestNetOfHeaders: with B, B-ctx and C runs in two rounds, the main
// like-with-like pair carries C against B-ctx paired by round (C/B-ctx,
// C − B-ctx, B-ctx − B, p50 at the latency concurrency) with the label,
// the ratios hold them, and C/B stays the judged target.
func TestNetOfHeaders(t *testing.T) {
	cfg := &config{concurrency: 16, latConcurrency: 1, logConf: "shipped"}
	r := &report{}
	run := func(s string, conc, round int, rps, cpu, p50 float64) {
		r.Runs = append(r.Runs, runResult{Scenario: s, Concurrency: conc, Round: round, Phase: "main",
			RPS: rps, SidecarCPUus: cpu, P50us: p50, AgentOK: true})
	}
	run("B", 16, 1, 1000, 100, 0)
	run(scenBCtx, 16, 1, 800, 140, 0)
	run("C", 16, 1, 760, 150, 0)
	run("B", 16, 2, 1000, 110, 0)
	run(scenBCtx, 16, 2, 900, 150, 0)
	run("C", 16, 2, 810, 154, 0)
	run("B", 1, 1, 0, 0, 500)
	run(scenBCtx, 1, 1, 0, 0, 520)
	run("C", 1, 1, 0, 0, 560)
	r.summarize(cfg)
	if len(r.LikeWithLike) != 1 || r.LikeWithLike[0].NetOfHeaders == nil {
		t.Fatalf("like with like: %+v", r.LikeWithLike)
	}
	n := r.LikeWithLike[0].NetOfHeaders
	near := func(what string, got, want float64) {
		t.Helper()
		if got < want-1e-9 || got > want+1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("C/B-ctx", n.CBCtx.Median, (0.95+0.9)/2)
	near("C - B-ctx", n.GateCPUus.Median, (10+4)/2.0)
	near("C - B-ctx min", n.GateCPUus.Min, 4)
	near("B-ctx - B", n.HeaderCPU.Median, 40)
	near("p50 C - B-ctx", n.P50DiffUs.Median, 40)
	near("ratio C/B-ctx", r.Ratios["C/B-ctx"], (0.95+0.9)/2)
	near("ratio C-B-ctx", r.Ratios["C-B-ctx_sidecar_cpu_us"], 7)
	near("C/B", r.Ratios["C/B"], (0.76+0.81)/2)
	if n.Label != bctxLabel || n.BCtx != scenBCtx {
		t.Errorf("label %q, b_ctx %q", n.Label, n.BCtx)
	}
	for _, tg := range r.Targets {
		if strings.Contains(tg.Name, "B-ctx") && !tg.Info {
			t.Errorf("target %q judged; C/B stays the target", tg.Name)
		}
		if strings.HasPrefix(tg.Name, "C/B throughput") && tg.Info {
			t.Errorf("C/B is no longer judged")
		}
	}
}
