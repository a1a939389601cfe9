package main

import (
	"fmt"
	"slices"
)

// likePair compares B and C served by one sidecar process (the same global
// options, the same request bytes) over the interleaved rounds: each figure
// is the median over rounds of the per-round value, with its spread
// (min..max over rounds) where the target is about a difference.
type likePair struct {
	Config      string  `json:"config"` // which process and logging choice
	B           string  `json:"b"`
	C           string  `json:"c"`
	Concurrency int     `json:"concurrency"`
	Rounds      int     `json:"rounds"`
	CB          spread  `json:"c_over_b_rps"`
	BCPUus      float64 `json:"b_cpu_us_per_req"`
	CCPUus      float64 `json:"c_cpu_us_per_req"`
	GateCPUus   spread  `json:"gate_cpu_us_per_req"` // C - B sidecar CPU per request
	GateAllocs  float64 `json:"gate_allocs_per_req"` // C - B heap allocations per request
	GateBytes   float64 `json:"gate_alloc_bytes_per_req"`
	GateSyscW   float64 `json:"gate_syscw_per_req"` // C - B write-family system calls per request
	LatConc     int     `json:"latency_concurrency"`
	P50DiffUs   spread  `json:"p50_diff_us"` // C p50 - B p50 at LatConc
	// NetOfHeaders is C against B-ctx in the same process (main process
	// only: the twin serves no B-ctx); nil when B-ctx did not run.
	NetOfHeaders *netOfHeaders `json:"net_of_headers,omitempty"`
}

// netOfHeaders compares C with B-ctx (bctx.go): plain reverse_proxy whose
// client sends the ten verified headers, so that the agent receives the
// same header set as from C. Each spread is over the interleaved rounds.
type netOfHeaders struct {
	Label      string  `json:"label"` // bctxLabel: what the figures are, and the bytes that differ
	BCtx       string  `json:"b_ctx"`
	BCtxCPUus  float64 `json:"b_ctx_cpu_us_per_req"`
	CBCtx      spread  `json:"c_over_b_ctx_rps"`
	GateCPUus  spread  `json:"gate_cpu_us_per_req"`      // C - B-ctx sidecar CPU per request
	HeaderCPU  spread  `json:"headers_cpu_us_per_req"`   // B-ctx - B: carrying the ten headers in plain Caddy
	GateAllocs float64 `json:"gate_allocs_per_req"`      // C - B-ctx heap allocations per request
	GateBytes  float64 `json:"gate_alloc_bytes_per_req"` // C - B-ctx heap bytes per request
	P50DiffUs  spread  `json:"p50_diff_us,omitzero"`     // C p50 - B-ctx p50 at the latency concurrency
}

// netOfHeaders is C against B-ctx at conc (with the latency run's p50 at
// latConc), or nil without B-ctx's or C's runs.
func (r *report) netOfHeaders(conc, latConc int) *netOfHeaders {
	b, okB := r.summary(scenBCtx, conc)
	c, okC := r.summary("C", conc)
	if !okB || !okC {
		return nil
	}
	n := &netOfHeaders{Label: bctxLabel, BCtx: scenBCtx, BCtxCPUus: b.SidecarCPUus,
		CBCtx:      r.pairedSpread("C", scenBCtx, conc, rpsRatio),
		GateCPUus:  r.pairedSpread("C", scenBCtx, conc, cpuDiff),
		HeaderCPU:  r.pairedSpread(scenBCtx, "B", conc, cpuDiff),
		GateAllocs: c.SidecarAllocs - b.SidecarAllocs, GateBytes: c.SidecarAllocBytes - b.SidecarAllocBytes,
	}
	if latConc > 0 {
		n.P50DiffUs = r.pairedSpread("C", scenBCtx, latConc, p50Diff)
	}
	return n
}

// spread is a median over rounds with the smallest and largest value.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"rounds"`
}

// pairedSpread is paired's values (f of the runs of the same round) as a spread.
func (r *report) pairedSpread(a, b string, conc int, f func(x, y runResult) float64) spread {
	var v []float64
	for _, x := range r.runsOf(a, conc) {
		for _, y := range r.runsOf(b, conc) {
			if x.Round == y.Round && x.Phase == y.Phase {
				v = append(v, f(x, y))
			}
		}
	}
	if len(v) == 0 {
		return spread{}
	}
	return spread{Median: median(v), Min: slices.Min(v), Max: slices.Max(v), N: len(v)}
}

func (s spread) String() string {
	return fmt.Sprintf("%.3g (%.3g..%.3g over %d rounds)", s.Median, s.Min, s.Max, s.N)
}

// likeWithLike fills r.LikeWithLike for the main process's B and C and the
// twin's, and adds the targets of the gate's own cost (issue 24):
// gate CPU above B <= 15 µs and D above B <= 1.3 x a bare Ed25519 verify
// (BenchmarkVerify/bare_ed25519, from -gobench) + 15 µs.
func (r *report) likeWithLike(cfg *config, add func(target)) {
	main := cfg.concurrency
	pairs := [][3]string{{"main process, " + logChoice(cfg, false), "B", "C"}}
	for _, s := range r.Summaries {
		if base, ok := cutTwin(s.Scenario, "B"); ok && s.Concurrency == main {
			pairs = append(pairs, [3]string{"twin process, " + logChoice(cfg, true), s.Scenario, "C" + base})
		}
	}
	for _, p := range pairs {
		b, okB := r.summary(p[1], main)
		c, okC := r.summary(p[2], main)
		if !okB || !okC {
			continue
		}
		lp := likePair{Config: p[0], B: p[1], C: p[2], Concurrency: main, Rounds: min(b.Rounds, c.Rounds),
			BCPUus: b.SidecarCPUus, CCPUus: c.SidecarCPUus, LatConc: cfg.latConcurrency,
			CB: r.pairedSpread(p[2], p[1], main, func(x, y runResult) float64 {
				if y.RPS == 0 {
					return 0
				}
				return x.RPS / y.RPS
			}),
			GateCPUus:  r.pairedSpread(p[2], p[1], main, func(x, y runResult) float64 { return x.SidecarCPUus - y.SidecarCPUus }),
			GateAllocs: c.SidecarAllocs - b.SidecarAllocs, GateBytes: c.SidecarAllocBytes - b.SidecarAllocBytes,
			GateSyscW: c.SidecarSyscW - b.SidecarSyscW,
		}
		if cfg.latConcurrency > 0 {
			lp.P50DiffUs = r.pairedSpread(p[2], p[1], cfg.latConcurrency, func(x, y runResult) float64 { return x.P50us - y.P50us })
		}
		if p[1] == "B" {
			lp.NetOfHeaders = r.netOfHeaders(main, cfg.latConcurrency)
		}
		r.LikeWithLike = append(r.LikeWithLike, lp)
		t := target{Name: fmt.Sprintf("gate CPU above B (C-B, c=%d), %s", main, p[0]), Value: lp.GateCPUus.Median, Unit: "µs/req",
			Limit: "<= 15", Pass: lp.GateCPUus.Median <= 15, Note: fmt.Sprintf("rounds %.1f..%.1f", lp.GateCPUus.Min, lp.GateCPUus.Max)}
		if p[1] != "B" {
			t.Info = true // the target is judged on the main process (-logconf)
		}
		add(t)
		if n := lp.NetOfHeaders; n != nil {
			add(target{Name: fmt.Sprintf("gate CPU above B-ctx (C-B-ctx, c=%d), net of the ten headers", main), Value: n.GateCPUus.Median,
				Unit: "µs/req", Limit: "<= 15", Pass: n.GateCPUus.Median <= 15, Info: true,
				Note: fmt.Sprintf("rounds %.1f..%.1f; for comparison: the target is judged on C-B", n.GateCPUus.Min, n.GateCPUus.Max)})
		}
	}
	r.dAboveB(main, add)
}

// pacedKey names D-paced above B-paced in Ratios.
const pacedKey = scenDPaced + "-" + scenBPaced

// dAboveB adds the target D above B <= 1.3 x a bare Ed25519 verify
// (BenchmarkVerify/bare_ed25519, from -gobench) + 15 µs, with the agent's
// CPU a request D - B beside it (the same work: what D's slower rate costs
// each request of every process), and, with -paced, D above B at one rate
// (pace.go; information).
func (r *report) dAboveB(main int, add func(target)) {
	dAbove, ok := r.Ratios["D-B_sidecar_cpu_us"]
	if !ok {
		return
	}
	t := target{Name: fmt.Sprintf("D above B (sidecar CPU, c=%d)", main), Value: dAbove, Unit: "µs/req"}
	if gb, ok := findBench(r.GoBench, "BenchmarkVerify/bare_ed25519"); ok && gb.Metrics["ns/op"] > 0 {
		bare := gb.Metrics["ns/op"] / 1e3
		limit := 1.3*bare + 15
		t.Limit, t.Pass = fmt.Sprintf("<= %.1f", limit), dAbove <= limit
		t.Note = fmt.Sprintf("1.3 x bare Ed25519 verify %.1f µs + 15", bare)
	} else {
		t.Info, t.Limit = true, "1.3 x bare verify + 15"
		t.Note = "no BenchmarkVerify/bare_ed25519 figure: run with -gobench (make bench does)"
	}
	if a, ok := r.Ratios["D-B_agent_cpu_us"]; ok {
		t.Note += fmt.Sprintf("; agent CPU D-B %+.1f µs/req for the same work", a)
	}
	add(t)
	paced, ok := r.Ratios[pacedKey+"_sidecar_cpu_us"]
	if !ok {
		return
	}
	note := fmt.Sprintf("agent CPU %+.1f µs/req (alike: near 0); reached rate B %.2f, D %.2f of target",
		r.Ratios[pacedKey+"_agent_cpu_us"], r.reachedRate(scenBPaced, main), r.reachedRate(scenDPaced, main))
	add(target{Name: fmt.Sprintf("D above B at one rate (%s, sidecar CPU, c=%d)", pacedKey, main), Value: paced,
		Unit: "µs/req", Info: true, Limit: t.Limit, Note: note})
}

// reachedRate is the median over rounds of a paced scenario's rate over
// its target rate.
func (r *report) reachedRate(scen string, conc int) float64 {
	var v []float64
	for _, x := range r.runsOf(scen, conc) {
		if x.PacedRPS > 0 {
			v = append(v, x.RPS/x.PacedRPS)
		}
	}
	return median(v)
}

// logChoice describes the process's reverse_proxy logging under -logconf.
func logChoice(cfg *config, twin bool) string {
	excluded := cfg.logConf == "shipped"
	if twin {
		excluded = !excluded
	}
	what := map[bool]string{true: "reverse_proxy logger excluded", false: "reverse_proxy logger included"}[excluded]
	return cfg.logConf + " logs, " + what
}

// cutTwin reports whether name is the twin's scenario of base, and its suffix.
func cutTwin(name, base string) (string, bool) {
	for _, suf := range []string{"-rplog", "-norplog"} {
		if name == base+suf {
			return suf, true
		}
	}
	return "", false
}

func (r *report) printLikeWithLike() {
	if len(r.LikeWithLike) == 0 {
		return
	}
	fmt.Printf("\nlike with like: B and C in one process (same global options, same bytes), medians of per-round values (min..max)\n")
	for _, p := range r.LikeWithLike {
		fmt.Printf("  %s: %s vs %s, c=%d\n", p.Config, p.C, p.B, p.Concurrency)
		fmt.Printf("    C/B req/s          %s\n", p.CB)
		fmt.Printf("    proxy CPU µs/req   B %.1f  C %.1f  gate (C-B) %s\n", p.BCPUus, p.CCPUus, p.GateCPUus)
		fmt.Printf("    gate per request   allocs %+.1f  bytes %+.0f  write syscalls %+.2f\n", p.GateAllocs, p.GateBytes, p.GateSyscW)
		if p.LatConc > 0 {
			fmt.Printf("    p50 C-B (c=%d)      %s µs\n", p.LatConc, p.P50DiffUs)
		}
		if n := p.NetOfHeaders; n != nil {
			fmt.Printf("    C vs %s: %s\n", n.BCtx, n.Label)
			fmt.Printf("      C/B-ctx req/s        %s\n", n.CBCtx)
			fmt.Printf("      proxy CPU µs/req     B-ctx %.1f  C %.1f  gate (C-B-ctx) %s\n", n.BCtxCPUus, p.CCPUus, n.GateCPUus)
			fmt.Printf("      the ten headers      (B-ctx-B) %s µs/req\n", n.HeaderCPU)
			fmt.Printf("      gate per request     allocs %+.1f  bytes %+.0f (C-B-ctx)\n", n.GateAllocs, n.GateBytes)
			if p.LatConc > 0 {
				fmt.Printf("      p50 C-B-ctx (c=%d)    %s µs\n", p.LatConc, n.P50DiffUs)
			}
		}
	}
}

// printProcess prints the process-level figures of the serving sidecar per
// request, at each concurrency.
func (r *report) printProcess() {
	conc := -1
	for _, s := range r.Summaries {
		if s.Scenario == "A" {
			continue
		}
		if s.Concurrency != conc {
			conc = s.Concurrency
			fmt.Printf("\nprocess level, concurrency %d (the serving sidecar process, per request)\n", conc)
			fmt.Printf("%-10s %9s %9s %9s %9s %9s %11s %8s\n", "scenario", "CPU µs", "write sc", "allocs", "KiB", "GCs/1k", "pause µs", "GC CPU")
		}
		fmt.Printf("%-10s %9.1f %9.2f %9.1f %9.2f %9.2f %11.3f %7.1f%%\n", s.Scenario, s.SidecarCPUus, s.SidecarSyscW,
			s.SidecarAllocs, s.SidecarAllocBytes/1024, s.SidecarGCsPer1k, s.SidecarGCPauseUs, 100*s.SidecarGCCPUShare)
	}
}
