package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

type machine struct {
	CPUs         int     `json:"cpus"`
	CPUModel     string  `json:"cpu_model"`
	MemTotalMiB  int64   `json:"mem_total_mib"`
	Kernel       string  `json:"kernel"`
	GoVersion    string  `json:"go_version"`
	LoadAvgStart string  `json:"loadavg_start"`
	LoadAvgEnd   string  `json:"loadavg_end"`
	ClockTicks   float64 `json:"clock_ticks"`
}

func machineInfo() machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: loadAvg(), ClockTicks: clockTicks}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, v, _ := strings.Cut(l, ":")
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			m.MemTotalMiB = kb / 1024
		}
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func (c *config) summary() map[string]any {
	var only []string
	for k := range c.only {
		only = append(only, k)
	}
	slices.Sort(only)
	return map[string]any{
		"concurrency": c.concurrency, "duration": c.duration.String(), "warmup": c.warmup.String(), "rounds": c.rounds,
		"latency_concurrency": c.latConcurrency, "latency_duration": c.latDuration.String(),
		"scaling": c.scaling, "scaling_duration": c.scalingDuration.String(), "scaling_rounds": c.scalingRounds,
		"sse_streams": c.sseStreams, "tokens_D": c.tokens, "redis": c.redis, "sidecar_log": c.logMode, "only": only,
		"sidecar_env": c.sidecarEnv, "logconf": c.logConf, "twin": c.twin, "admin": c.admin,
		"client": "Go net/http, one keep-alive connection per worker",
	}
}

// summary is the median over rounds of one scenario at one concurrency.
type summary struct {
	Scenario      string  `json:"scenario"`
	Desc          string  `json:"desc"`
	Concurrency   int     `json:"concurrency"`
	Rounds        int     `json:"rounds"`
	RPS           float64 `json:"rps"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	SidecarCPUus  float64 `json:"sidecar_cpu_us_per_req"`
	UpstreamCPUus float64 `json:"upstream_cpu_us_per_req"`
	ClientCPUus   float64 `json:"client_cpu_us_per_req"`
	SidecarSyscR  float64 `json:"sidecar_syscr_per_req"`
	SidecarSyscW  float64 `json:"sidecar_syscw_per_req"`
	// Go memory per request of the serving sidecar process (see runResult).
	SidecarAllocs     float64 `json:"sidecar_allocs_per_req"`
	SidecarAllocBytes float64 `json:"sidecar_alloc_bytes_per_req"`
	SidecarGCsPer1k   float64 `json:"sidecar_gcs_per_1k_req"`
	SidecarGCPauseUs  float64 `json:"sidecar_gc_pause_us_per_req"`
	SidecarGCCPUShare float64 `json:"sidecar_gc_cpu_share"`
	Errors            int64   `json:"errors"`
	Unexpected        int64   `json:"unexpected"`
	AgentOK           bool    `json:"agent_calls_as_expected"`
}

type target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	Limit string  `json:"limit"`
	Pass  bool    `json:"pass"`
	Note  string  `json:"note,omitempty"`
	// Info marks a figure printed next to a target for comparison: it is
	// not the target's verdict (printed "info", not PASS/FAIL).
	Info bool `json:"info,omitempty"`
}

type report struct {
	Started           time.Time          `json:"started"`
	Finished          time.Time          `json:"finished"`
	Machine           machine            `json:"machine"`
	Config            map[string]any     `json:"config"`
	SidecarIdleRSSMi  float64            `json:"sidecar_idle_rss_mib"`
	SidecarIdleAnonMi float64            `json:"sidecar_idle_rss_anon_mib"`
	SidecarIdleFileMi float64            `json:"sidecar_idle_rss_file_mib"`
	SidecarFinalRSSMi float64            `json:"sidecar_final_rss_mib"`
	SidecarPeakRSSMi  float64            `json:"sidecar_peak_rss_mib"`
	Runs              []runResult        `json:"runs"`
	Summaries         []summary          `json:"summaries"`
	Ratios            map[string]float64 `json:"ratios"`
	SSE               []sseResult        `json:"sse"`
	GoBench           []goBench          `json:"go_benchmarks,omitempty"`
	LikeWithLike      []likePair         `json:"like_with_like,omitempty"`
	Targets           []target           `json:"targets"`
	Notes             []string           `json:"notes,omitempty"`
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r *report) runsOf(scen string, conc int) []runResult {
	var out []runResult
	for _, x := range r.Runs {
		if x.Scenario == scen && x.Concurrency == conc {
			out = append(out, x)
		}
	}
	return out
}

func (r *report) summary(scen string, conc int) (summary, bool) {
	for _, s := range r.Summaries {
		if s.Scenario == scen && s.Concurrency == conc {
			return s, true
		}
	}
	return summary{}, false
}

// pairedRatio is the median over rounds of f(a's run, b's run) for the
// runs of the same round (interleaved neighbours).
func (r *report) paired(a, b string, conc int, f func(x, y runResult) float64) (float64, bool) {
	ra, rb := r.runsOf(a, conc), r.runsOf(b, conc)
	var v []float64
	for _, x := range ra {
		for _, y := range rb {
			if x.Round == y.Round && x.Phase == y.Phase {
				v = append(v, f(x, y))
			}
		}
	}
	return median(v), len(v) > 0
}

// summarize derives from the runs the summaries, the paired ratios, the
// targets with their verdicts and the notes on runs that did not measure
// what they claim.
func (r *report) summarize(cfg *config) {
	r.summarizeRuns()
	r.setRatios(cfg)
	add := func(t target) { r.Targets = append(r.Targets, t) }
	r.ratioTargets(cfg, add)
	r.likeWithLike(cfg, add) // likewithlike.go: gate CPU above B, D above B against a bare verify
	r.replayTargets(cfg, add)
	r.sseTargets(cfg, add)
	r.goBenchTargets(add)
	r.checkRuns()
}

// summarizeRuns appends a summary per scenario and concurrency, in the
// order of the runs, stably by concurrency.
func (r *report) summarizeRuns() {
	type key struct {
		s string
		c int
	}
	var order []key
	seen := map[key]bool{}
	for _, x := range r.Runs {
		k := key{x.Scenario, x.Concurrency}
		if !seen[k] {
			seen[k] = true
			order = append(order, k)
		}
	}
	slices.SortStableFunc(order, func(a, b key) int { return a.c - b.c })
	for _, k := range order {
		r.Summaries = append(r.Summaries, summaryOf(k.s, k.c, r.runsOf(k.s, k.c)))
	}
}

// summaryOf is the summary of the runs of scenario scen at conc: the
// median over rounds of each figure, the sums of errors, and whether the
// agent calls were as expected in every round.
func summaryOf(scen string, conc int, runs []runResult) summary {
	col := func(f func(runResult) float64) float64 {
		v := make([]float64, len(runs))
		for i, x := range runs {
			v[i] = f(x)
		}
		return median(v)
	}
	s := summary{Scenario: scen, Desc: scenarioDesc(scen), Concurrency: conc, Rounds: len(runs), AgentOK: true,
		RPS:               col(func(x runResult) float64 { return x.RPS }),
		P50us:             col(func(x runResult) float64 { return x.P50us }),
		P99us:             col(func(x runResult) float64 { return x.P99us }),
		SidecarCPUus:      col(func(x runResult) float64 { return x.SidecarCPUus }),
		UpstreamCPUus:     col(func(x runResult) float64 { return x.UpstreamCPUus }),
		ClientCPUus:       col(func(x runResult) float64 { return x.ClientCPUus }),
		SidecarSyscR:      col(func(x runResult) float64 { return x.SidecarSyscR }),
		SidecarSyscW:      col(func(x runResult) float64 { return x.SidecarSyscW }),
		SidecarAllocs:     col(func(x runResult) float64 { return x.SidecarAllocsPerReq }),
		SidecarAllocBytes: col(func(x runResult) float64 { return x.SidecarAllocBytesPerReq }),
		SidecarGCsPer1k:   col(func(x runResult) float64 { return x.SidecarGCsPer1kReq }),
		SidecarGCPauseUs:  col(func(x runResult) float64 { return x.SidecarGCPauseUsPerReq }),
		SidecarGCCPUShare: col(func(x runResult) float64 { return x.SidecarGCCPUShare }),
	}
	for _, x := range runs {
		s.Errors += x.Errors
		s.Unexpected += x.Unexpected
		s.AgentOK = s.AgentOK && x.AgentOK
	}
	return s
}

// rpsRatio is x's throughput over y's (0 without y's): a paired figure of
// two runs of the same round, as are p50Diff, p99Diff and cpuDiff.
func rpsRatio(x, y runResult) float64 {
	if y.RPS == 0 {
		return 0
	}
	return x.RPS / y.RPS
}

func p50Diff(x, y runResult) float64 { return x.P50us - y.P50us }
func p99Diff(x, y runResult) float64 { return x.P99us - y.P99us }
func cpuDiff(x, y runResult) float64 { return x.SidecarCPUus - y.SidecarCPUus }

// setRatios sets r.Ratios: each scenario against B, paired by round, for
// throughput, latency and the sidecar's CPU per request.
func (r *report) setRatios(cfg *config) {
	main := cfg.concurrency
	r.Ratios = map[string]float64{}
	for _, n := range []string{"C", "D", "E", "F-mem", "F-redis", "A", "B-hdr", "C-nofwd", "C-nohdr", "C-compact", scenBCtx} {
		if v, ok := r.paired(n, "B", main, rpsRatio); ok {
			r.Ratios[n+"/B"] = v
		}
	}
	// C against B-ctx (bctx.go): the gate net of carrying the ten headers.
	if v, ok := r.paired("C", scenBCtx, main, rpsRatio); ok {
		r.Ratios["C/"+scenBCtx] = v
	}
	if v, ok := r.paired("C", scenBCtx, main, cpuDiff); ok {
		r.Ratios["C-"+scenBCtx+"_sidecar_cpu_us"] = v
	}
	if v, ok := r.paired("C", "B", main, p99Diff); ok {
		r.Ratios["C-B_p99_us"] = v
	}
	if v, ok := r.paired("C", "B", 32, rpsRatio); ok && main != 32 {
		r.Ratios["C/B_c32"] = v
	}
	if v, ok := r.paired("C", "B", cfg.latConcurrency, p50Diff); ok && cfg.latConcurrency > 0 {
		r.Ratios[fmt.Sprintf("C-B_p50_us_c%d", cfg.latConcurrency)] = v
	}
	if v, ok := r.paired("C", "B", cfg.latConcurrency, p99Diff); ok && cfg.latConcurrency > 0 {
		r.Ratios[fmt.Sprintf("C-B_p99_us_c%d", cfg.latConcurrency)] = v
	}
	for _, n := range []string{"C", "D", "E", "F-mem", "F-redis", "B-hdr", "C-nofwd", "C-nohdr", "C-compact", scenBCtx} {
		if v, ok := r.paired(n, "B", main, cpuDiff); ok {
			r.Ratios[n+"-B_sidecar_cpu_us"] = v
		}
	}
	// D against B at one rate (pace.go): the sidecar's and, as a check
	// that the two runs are alike, the agent's CPU a request.
	if v, ok := r.paired(scenDPaced, scenBPaced, main, cpuDiff); ok {
		r.Ratios[pacedKey+"_sidecar_cpu_us"] = v
	}
	if v, ok := r.paired(scenDPaced, scenBPaced, main, agentCPUDiff); ok {
		r.Ratios[pacedKey+"_agent_cpu_us"] = v
	}
	if v, ok := r.paired("D", "B", main, agentCPUDiff); ok {
		r.Ratios["D-B_agent_cpu_us"] = v
	}
}

func agentCPUDiff(x, y runResult) float64 { return x.UpstreamCPUus - y.UpstreamCPUus }

// ratioTargets judges the throughput and latency ratios against B.
func (r *report) ratioTargets(cfg *config, add func(target)) {
	main := cfg.concurrency
	if v, ok := r.Ratios["C/B"]; ok {
		add(target{Name: fmt.Sprintf("C/B throughput (c=%d)", main), Value: v, Limit: ">= 0.90", Pass: v >= 0.90})
	}
	if v, ok := r.Ratios["C/B_c32"]; ok {
		add(target{Name: "C/B throughput (c=32)", Value: v, Limit: ">= 0.90", Pass: v >= 0.90, Note: "scaling run"})
	}
	if v, ok := r.Ratios[fmt.Sprintf("C-B_p50_us_c%d", cfg.latConcurrency)]; ok {
		add(target{Name: fmt.Sprintf("C p50 - B p50 (c=%d)", cfg.latConcurrency), Value: v, Unit: "µs", Limit: "<= 25", Pass: v <= 25,
			Note: "unloaded service latency"})
	}
	if v, ok := r.Ratios["C-B_p99_us"]; ok {
		add(target{Name: fmt.Sprintf("C p99 - B p99 (c=%d)", main), Value: v, Unit: "µs", Limit: "<= 250", Pass: v <= 250})
	}
	if v, ok := r.Ratios[fmt.Sprintf("C-B_p99_us_c%d", cfg.latConcurrency)]; ok {
		add(target{Name: fmt.Sprintf("C p99 - B p99 (c=%d)", cfg.latConcurrency), Value: v, Unit: "µs", Limit: "<= 250", Pass: v <= 250,
			Note: "unloaded service latency"})
	}
	if v, ok := r.Ratios["D/B"]; ok {
		add(target{Name: fmt.Sprintf("D/B throughput (c=%d)", main), Value: v, Limit: ">= 0.65", Pass: v >= 0.65})
	}
}

// replayTargets judges the p99 of the idempotent replays (F-mem, F-redis)
// at the main and the latency concurrency.
func (r *report) replayTargets(cfg *config, add func(target)) {
	main := cfg.concurrency
	for _, f := range []struct {
		name  string
		limit float64
	}{{"F-mem", 1000}, {"F-redis", 2000}} {
		for _, c := range []int{main, cfg.latConcurrency} {
			if s, ok := r.summary(f.name, c); ok && c > 0 {
				t := target{Name: fmt.Sprintf("%s replay p99 (c=%d)", f.name, c), Value: s.P99us, Unit: "µs",
					Limit: fmt.Sprintf("<= %.0f", f.limit), Pass: s.P99us <= f.limit}
				if c != main {
					t.Note = "unloaded service latency"
				}
				add(t)
			}
		}
	}
}

// sseTargets judges the RSS with the streams open: the target is judged on
// a fresh process (the state the streams meet after a start or a reload);
// after the load runs the process also holds heap the Go runtime has not
// returned to the kernel yet, shown for information.
func (r *report) sseTargets(cfg *config, add func(target)) {
	for _, site := range []struct{ name, desc string }{
		{siteCFan, "events_fanout on"}, {siteC, "a proxied stream per client"}} {
		for _, s := range r.SSE {
			if s.Site != site.name || s.Opened == 0 {
				continue
			}
			t := target{Name: fmt.Sprintf("sidecar RSS, %d SSE streams open, %s, %s", cfg.sseStreams, site.desc, strings.ReplaceAll(s.When, "_", " ")),
				Value: s.RSSMi, Unit: "MiB", Limit: "<= 80", Pass: s.RSSMi <= 80}
			switch {
			case s.When != "fresh":
				t.Info = true
				t.Note = fmt.Sprintf("RSS before the streams %.0f MiB: heap kept from the load runs", s.RSSBeforeMi)
			case site.name == siteC:
				t.Info = true
				t.Note = "for comparison: the target is judged with events_fanout"
			}
			add(t)
		}
	}
}

// goBenchTargets judges the Go benchmarks of -gobench: the decision and
// parse times, and the allocation budgets.
func (r *report) goBenchTargets(add func(target)) {
	if gb, ok := findBench(r.GoBench, "BenchmarkDecideCall/cached_token"); ok {
		add(target{Name: "go: decision, cached token", Value: gb.Metrics["ns/op"], Unit: "ns/op", Limit: "<= 3000",
			Pass: gb.Metrics["ns/op"] <= 3000})
		add(target{Name: "go: decision, cached token", Value: gb.Metrics["allocs/op"], Unit: "allocs/op", Limit: "<= 10",
			Pass: gb.Metrics["allocs/op"] <= 10})
	}
	if gb, ok := findBench(r.GoBench, "BenchmarkParse/fixture_job_start"); ok {
		add(target{Name: "go: envelope parse, fixture job.start", Value: gb.Metrics["ns/op"], Unit: "ns/op", Limit: "<= 2000",
			Pass: gb.Metrics["ns/op"] <= 2000})
	}
	// Issue 34: the parse's throughput on large bodies, and on the
	// many-keys worst case (jsonrpc/bodies_bench_test.go).
	for _, p := range []struct {
		bench, name string
		min         float64
	}{
		{"job_start_64KiB", "64 KiB job.start of rows", 1000},
		{"rows_1MiB", "1 MiB of rows", 1000},
		{"many_keys_input_1MiB", "1 MiB of keys in input", 200},
		{"many_keys_params_1MiB", "1 MiB of keys in params", 200},
	} {
		if gb, ok := findBench(r.GoBench, "BenchmarkParseThroughput/"+p.bench); ok {
			add(target{Name: "go: envelope parse, " + p.name, Value: gb.Metrics["MB/s"], Unit: "MB/s",
				Limit: fmt.Sprintf(">= %.0f", p.min), Pass: gb.Metrics["MB/s"] >= p.min})
		}
	}

	// Allocation budgets: a benchmark that reports budget-allocs/op (the
	// hot-path budgets, kept out of make test) is judged against it.
	for _, gb := range r.GoBench {
		if budget, ok := gb.Metrics["budget-allocs/op"]; ok {
			add(target{Name: "go: allocation budget, " + strings.TrimPrefix(gb.Name, "Benchmark"),
				Value: gb.Metrics["allocs/op"], Unit: "allocs/op", Limit: fmt.Sprintf("<= %g", budget),
				Pass: gb.Metrics["allocs/op"] <= budget})
		}
	}
}

// checkRuns notes what shows a scenario did not measure what it claims:
// errors, unexpected answers or agent calls, D's cache hits, F's forwards.
func (r *report) checkRuns() {
	for _, s := range r.Summaries {
		if s.Errors > 0 || s.Unexpected > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s c=%d: %d transport errors, %d unexpected answers", s.Scenario, s.Concurrency, s.Errors, s.Unexpected))
		}
		if !s.AgentOK {
			r.Notes = append(r.Notes, fmt.Sprintf("%s c=%d: agent calls not as expected", s.Scenario, s.Concurrency))
		}
	}
	for _, x := range r.Runs {
		switch {
		case (x.Scenario == "D" || x.Scenario == scenDPaced) && x.Metrics != nil && x.Metrics["token_cache_hit"] > 0:
			r.Notes = append(r.Notes, fmt.Sprintf("D c=%d round %d: %.0f token cache hits (expected none)", x.Concurrency, x.Round, x.Metrics["token_cache_hit"]))
		case strings.HasPrefix(x.Scenario, "F") && x.Metrics != nil && x.Metrics["idempotency_forward"] > 0:
			r.Notes = append(r.Notes, fmt.Sprintf("%s round %d: %.0f forwards (expected replays only)", x.Scenario, x.Round, x.Metrics["idempotency_forward"]))
		}
	}
}

func scenarioDesc(name string) string {
	if base, suf, ok := strings.Cut(name, "-"); ok && (suf == "rplog" || suf == "norplog") {
		return scenarioDesc(base) + map[bool]string{true: ", +rp logger", false: ", -rp logger"}[suf == "rplog"]
	}
	switch name {
	case "A":
		return "direct to the upstream"
	case "B":
		return "plain Caddy reverse_proxy"
	case "C":
		return "sidecar, one token (cached)"
	case "D":
		return "sidecar, new token each request"
	case "E":
		return "sidecar, bad signature refused"
	case "F-mem":
		return "sidecar, job.start replay (memory)"
	case "F-redis":
		return "sidecar, job.start replay (redis)"
	case "B-hdr":
		return "plain proxy + 10 verified headers"
	case scenBCtx:
		return "plain proxy, client sends 10 headers"
	case "C-nofwd":
		return "sidecar, forward_token off"
	}
	return name
}

func (r *report) print(cfg *config) {
	fmt.Printf("\n== results: medians over rounds; machine %d CPUs (%s), load average %s -> %s\n",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd)
	conc := -1
	for _, s := range r.Summaries {
		if s.Concurrency != conc {
			conc = s.Concurrency
			fmt.Printf("\nconcurrency %d\n", conc)
			fmt.Printf("%-8s %-36s %9s %9s %9s %12s %12s %12s %9s %s\n", "scenario", "", "req/s", "p50 µs", "p99 µs", "sidecar µs/r", "agent µs/r", "client µs/r", "sys r/w", "checks")
		}
		check := "ok"
		if s.Errors > 0 || s.Unexpected > 0 || !s.AgentOK {
			check = fmt.Sprintf("errors %d, unexpected %d, agent ok %v", s.Errors, s.Unexpected, s.AgentOK)
		}
		fmt.Printf("%-8s %-36s %9.0f %9.0f %9.0f %12.1f %12.1f %12.1f %4.1f/%-4.1f %s\n", s.Scenario, s.Desc, s.RPS, s.P50us, s.P99us,
			s.SidecarCPUus, s.UpstreamCPUus, s.ClientCPUus, s.SidecarSyscR, s.SidecarSyscW, check)
	}
	r.printProcess()
	r.printLikeWithLike()
	fmt.Printf("\nratios (c=%d, median of per-round ratios):", cfg.concurrency)
	for _, k := range []string{"C/B", "D/B", "E/B", "F-mem/B", "F-redis/B", "A/B", "B-hdr/B", "C-nofwd/B", "C-nohdr/B", "C-compact/B", "C/B_c32", scenBCtx + "/B", "C/" + scenBCtx} {
		if v, ok := r.Ratios[k]; ok {
			fmt.Printf("  %s %.3f", k, v)
		}
	}
	fmt.Printf("\nsidecar CPU per request above B (µs):")
	for _, k := range []string{"C", "D", "E", "F-mem", "F-redis", "B-hdr", "C-nofwd", scenBCtx} {
		if v, ok := r.Ratios[k+"-B_sidecar_cpu_us"]; ok {
			fmt.Printf("  %s %+.1f", k, v)
		}
	}
	if v, ok := r.Ratios["C-"+scenBCtx+"_sidecar_cpu_us"]; ok {
		fmt.Printf("\nsidecar CPU per request of C above B-ctx (µs): %+.1f  (%s)", v, bctxLabel)
	}
	if v, ok := r.Ratios[pacedKey+"_sidecar_cpu_us"]; ok {
		fmt.Printf("\nCPU per request of %s (µs): sidecar %+.1f  agent %+.1f (D-B unpaced: agent %+.1f)",
			pacedKey, v, r.Ratios[pacedKey+"_agent_cpu_us"], r.Ratios["D-B_agent_cpu_us"])
	}
	fmt.Println()
	if len(r.GoBench) > 0 {
		fmt.Printf("\ngo benchmarks (median of -count runs)\n")
		for _, g := range r.GoBench {
			fmt.Printf("  %-70s %s\n", g.Name, g.format())
		}
	}
	fmt.Printf("\ntargets\n")
	for _, t := range r.Targets {
		verdict := "FAIL"
		switch {
		case t.Info:
			verdict = "info"
		case t.Pass:
			verdict = "PASS"
		}
		note := ""
		if t.Note != "" {
			note = "  (" + t.Note + ")"
		}
		fmt.Printf("  %s  %-62s %10.3f %-9s %s%s\n", verdict, t.Name, t.Value, t.Unit, t.Limit, note)
	}
	for _, n := range r.Notes {
		fmt.Println("note:", n)
	}
}

func (r *report) write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	fmt.Println("\nwrote", path)
	return nil
}

// goBench is one benchmark's median over its -count runs.
type goBench struct {
	Package string             `json:"package"`
	Name    string             `json:"name"`
	Runs    int                `json:"runs"`
	Metrics map[string]float64 `json:"metrics"` // unit -> median value
}

func (g goBench) format() string {
	var parts []string
	for _, u := range []string{"ns/op", "B/op", "allocs/op"} {
		if v, ok := g.Metrics[u]; ok {
			parts = append(parts, fmt.Sprintf("%.6g %s", v, u))
		}
	}
	var extra []string
	for u := range g.Metrics {
		switch u {
		case "ns/op", "B/op", "allocs/op", "MB/s":
		default:
			extra = append(extra, u)
		}
	}
	slices.Sort(extra)
	for _, u := range extra {
		parts = append(parts, fmt.Sprintf("%.6g %s", g.Metrics[u], u))
	}
	return strings.Join(parts, "  ")
}

func findBench(list []goBench, name string) (goBench, bool) {
	for _, g := range list {
		if g.Name == name {
			return g, true
		}
	}
	return goBench{}, false
}

// parseGoBench reads `go test -bench` output: per benchmark (name without
// the -GOMAXPROCS suffix), the median of each metric over its runs.
func parseGoBench(path string) ([]goBench, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type acc struct {
		pkg  string
		runs int
		vals map[string][]float64
	}
	var order []string
	all := map[string]*acc{}
	pkg := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 4 {
			continue
		}
		name := fields[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		a := all[name]
		if a == nil {
			a = &acc{pkg: pkg, vals: map[string][]float64{}}
			all[name] = a
			order = append(order, name)
		}
		a.runs++
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			a.vals[fields[i+1]] = append(a.vals[fields[i+1]], v)
		}
	}
	var out []goBench
	for _, n := range order {
		a := all[n]
		g := goBench{Package: a.pkg, Name: n, Runs: a.runs, Metrics: map[string]float64{}}
		for u, v := range a.vals {
			g.Metrics[u] = median(v)
		}
		out = append(out, g)
	}
	return out, sc.Err()
}
