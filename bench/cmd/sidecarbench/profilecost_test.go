package main

import (
	"math"
	"regexp"
	"slices"
	"testing"
)

// cannedAll is `go tool pprof -top` of a C profile (shortened): 2 s of
// samples; Serve 0.80 s, of which 0.50 s under reverse_proxy; the
// background GC 0.20 s; one function listed twice (inlined and not).
const cannedAll = `File: supervaizer-sidecar
Build ID: f45fecdb20b0e474ea99f92fce4e68c66bb05ee0
Type: cpu
Time: 2026-12-02 12:16:29 UTC
Duration: 3s, Total samples = 2s (66.67%)
Showing nodes accounting for 2s, 100% of 2s total
      flat  flat%   sum%        cum   cum%
     0.40s 20.00% 20.00%      0.40s 20.00%  internal/runtime/syscall/linux.Syscall6
     0.10s  5.00% 25.00%      0.20s 10.00%  runtime.gcBgMarkWorker
    50ms  2.50% 27.50%      0.10s  5.00%  net/textproto.validHeaderFieldByte (inline)
    50ms  2.50% 30.00%      50ms  2.50%  net/textproto.validHeaderFieldByte
         0     0% 30.00%      0.80s 40.00%  github.com/supervaize/supervaizer-sidecar/gate.(*Gate).Serve
         0     0% 30.00%      0.50s 25.00%  github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.(*Handler).ServeHTTP
         0     0% 30.00%      1.90s 95.00%  github.com/caddyserver/caddy/v2/modules/caddyhttp.(*Server).ServeHTTP
`

// cannedOwn is the same profile with -focus Serve -ignore reverse_proxy:
// the total is still the whole profile's; Serve's cum is the own part.
const cannedOwn = `File: supervaizer-sidecar
Type: cpu
Duration: 3s, Total samples = 2s (66.67%)
Active filters:
   focus=(^|/)gate\.\(\*Gate\)\.Serve$
   ignore=(^|/)reverseproxy\.\(\*Handler\)\.ServeHTTP$
Showing nodes accounting for 0.30s, 15.00% of 2s total
      flat  flat%   sum%        cum   cum%
     0.12s  6.00%  6.00%      0.15s  7.50%  github.com/supervaize/supervaizer-sidecar/jsonrpc.Parse
     0.10s  5.00% 11.00%      0.10s  5.00%  runtime.mallocgc
     40ms  2.00% 13.00%      40ms  2.00%  github.com/supervaize/supervaizer-sidecar/gate.(*Gate).injectVerified (inline)
     20ms  1.00% 14.00%      0.30s 15.00%  github.com/supervaize/supervaizer-sidecar/gate.(*Gate).Serve
     10ms  0.50% 14.50%      0.25s 12.50%  github.com/supervaize/supervaizer-sidecar/gate.(*Gate).serveController
     10ms  0.50% 15.00%      0.30s 15.00%  github.com/caddyserver/caddy/v2/modules/caddyhttp.(*Server).ServeHTTP
`

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// TestParsePprofTop: the total, every row with its flat and cum in
// seconds, whatever the unit; an inlined and a plain listing of one
// function are one row; the filtered output keeps the whole total.
func TestParsePprofTop(t *testing.T) {
	all, err := parsePprofTop(cannedAll)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "total", all.Total, 2)
	if len(all.Rows) != 6 {
		t.Fatalf("%d rows: %+v", len(all.Rows), all.Rows)
	}
	near(t, "Serve cum", all.cum(fnGateServe), 0.8)
	near(t, "reverse_proxy cum", all.cum(fnReverseProxy), 0.5)
	near(t, "gcBgMarkWorker cum", all.cum(fnGCBgMark), 0.2)
	near(t, "validHeaderFieldByte flat (two listings)", all.cum("textproto.validHeaderFieldByte"), 0.15)
	near(t, "a function not there", all.cum("gate.(*Gate).pass"), 0)

	own, err := parsePprofTop(cannedOwn)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "filtered total", own.Total, 2)
	near(t, "own Serve cum", own.cum(fnGateServe), 0.3)

	// Without the Duration line, the total of "Showing nodes".
	noDur, err := parsePprofTop("Showing nodes accounting for 1s, 50% of 1.50s total\n      flat  flat%   sum%        cum   cum%\n 1s 50% 50% 1s 50%  main.f\n")
	if err != nil {
		t.Fatal(err)
	}
	near(t, "total from Showing", noDur.Total, 1.5)

	for _, bad := range []string{"", "Duration: 3s, Total samples = 2s\n", "Duration: 3s, Total samples = 2parsecs\n      flat  flat%   sum%        cum   cum%\n"} {
		if _, err := parsePprofTop(bad); err == nil {
			t.Errorf("parsePprofTop(%q) accepted", bad)
		}
	}
}

// TestParsePprofValue: pprof's time units, in seconds.
func TestParsePprofValue(t *testing.T) {
	for in, want := range map[string]float64{"0": 0, "1.20s": 1.2, "10ms": 0.01, "250us": 250e-6, "250µs": 250e-6,
		"250μs": 250e-6, "7ns": 7e-9, "2hrs": 7200, "3s": 3} {
		got, err := parsePprofValue(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		near(t, in, got, want)
	}
	for _, bad := range []string{"1.2", "s", "1.2MB", "x ms"} {
		if _, err := parsePprofValue(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestFuncIs: a short name matches the full name with any package path,
// not a longer function name or another package's.
func TestFuncIs(t *testing.T) {
	full := "github.com/supervaize/supervaizer-sidecar/gate.(*Gate).Serve"
	re := regexp.MustCompile(funcRegexp(fnGateServe))
	for name, want := range map[string]bool{full: true, fnGateServe: true,
		"github.com/supervaize/supervaizer-sidecar/gate.(*Gate).ServeHTTP":     false,
		"github.com/supervaize/supervaizer-sidecar/othergate.(*Gate).Serve":    false,
		"github.com/supervaize/supervaizer-sidecar/gate.(*Gate).Serve.func1":   false,
		"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.Serve": false} {
		if got := funcIs(name, fnGateServe); got != want {
			t.Errorf("funcIs(%q) = %v, want %v", name, got, want)
		}
		if got := re.MatchString(name); got != want {
			t.Errorf("funcRegexp matches %q: %v, want %v", name, got, want)
		}
	}
}

// TestOwnCostArithmetic: per request = samples × (process CPU ÷ profile
// samples) ÷ requests; the own part is Serve's cum in the filtered
// profile; the table's parts add up to the process's CPU.
func TestOwnCostArithmetic(t *testing.T) {
	all, _ := parsePprofTop(cannedAll)
	own, _ := parsePprofTop(cannedOwn)
	// 10,000 requests, 2.2 s of process CPU from /proc (220 µs/req), 2 s
	// of samples: scale 1.1.
	res := runResult{Scenario: "C", Requests: 10000, SidecarCPUus: 220}
	p := profScenario{Name: "C", Window: windowOf(res, all), All: all, Own: &own}
	near(t, "scale", p.Window.scale(), 1.1)
	near(t, "own µs/req", p.Window.usPerReq(own.cum(fnGateServe)), 0.3*1e6*1.1/10000) // 33
	cpu, ownUs, rp, gc, rest := costRows(p)
	near(t, "cpu", cpu, 220)
	near(t, "own", ownUs, 33)
	near(t, "reverse_proxy", rp, 55)
	near(t, "gc", gc, 22)
	near(t, "rest", rest, 220-33-55-22)

	b := profScenario{Name: "B", Window: windowOf(runResult{Requests: 20000, SidecarCPUus: 100}, all), All: all}
	if _, o, _, _, _ := costRows(b); o != 0 {
		t.Errorf("B's own part %v, want none", o)
	}
	near(t, "no requests", profWindow{CPUus: 1, Samples: 1}.usPerReq(1), 0)
	near(t, "no samples", profWindow{Requests: 1, CPUus: 1}.usPerReq(1), 0)
}

// TestOwnTopLists: by flat, most first; by cum below Serve, Serve and its
// callers left out.
func TestOwnTopLists(t *testing.T) {
	own, _ := parsePprofTop(cannedOwn)
	var names []string
	for _, r := range own.topFlat(3) {
		names = append(names, r.Name)
	}
	want := []string{"github.com/supervaize/supervaizer-sidecar/jsonrpc.Parse", "runtime.mallocgc",
		"github.com/supervaize/supervaizer-sidecar/gate.(*Gate).injectVerified"}
	if !slices.Equal(names, want) {
		t.Errorf("topFlat = %v, want %v", names, want)
	}
	names = nil
	for _, r := range own.topCumBelow(fnGateServe, 10) {
		names = append(names, r.Name)
	}
	want = []string{"github.com/supervaize/supervaizer-sidecar/gate.(*Gate).serveController",
		"github.com/supervaize/supervaizer-sidecar/jsonrpc.Parse", "runtime.mallocgc",
		"github.com/supervaize/supervaizer-sidecar/gate.(*Gate).injectVerified"}
	if !slices.Equal(names, want) {
		t.Errorf("topCumBelow = %v, want %v", names, want)
	}
}
