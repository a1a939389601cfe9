// Command sidecarbench measures the Supervaizer sidecar against a plain
// Caddy reverse proxy and the bare agent, side by side and interleaved.
//
//	sidecarbench [run] [flags]      the load run (make -f bench.mk bench)
//	sidecarbench profile [flags]    CPU profiles of the sidecar under load
//	sidecarbench fairness [flags]   one workspace flooding a limits rule while another sends at its normal rate
//	sidecarbench upstream [flags]   the bench agent (started by run/profile)
//
// The run starts, on loopback: the bench agent (this binary, "upstream"),
// redis-server when it is on PATH, and the sidecar binary with a generated
// Caddyfile (admin off, auto_https off) holding one site per scenario:
//
//	A        the agent directly
//	B        plain reverse_proxy to the agent (same binary, no supervaizer_auth)
//	B-ctx    B, the client itself sending the ten verified headers C's gate injects (bctx.go)
//	C        supervaizer_auth + reverse_proxy; job.sync with one valid token (cache warm)
//	D        same; a different valid token on every request (signature check each time)
//	E        same; tokens with a bad signature (refused; the agent is never called)
//	F-mem    same; job.start idempotent replays from the memory store
//	F-redis  same; replays from Redis (own redis-server, --save "" --appendonly no)
//
// Each round runs every scenario once, in that order, with a fixed number of
// connections for a fixed duration; the report gives the medians over
// rounds, the ratios to B, the targets as PASS/FAIL, and writes JSON.
// See bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	sidecarBin  string
	fixture     string
	concurrency int
	duration    time.Duration
	warmup      time.Duration
	rounds      int

	latConcurrency int
	latDuration    time.Duration

	scaling         []int
	scalingDuration time.Duration
	scalingRounds   int

	sseStreams int
	heartbeat  time.Duration
	tokens     int
	paced      float64 // -paced: the paced pair's share of D's rate (pace.go); 0: off
	redis      string  // auto, on, off
	logMode    string  // discard, file, buffered ("": as logConf ships)
	logConf    string  // shipped, single (logconf.go)
	twin       bool    // the twin process (twin.go)
	admin      bool    // the admin endpoint on loopback in the run (memstats)
	sidecarEnv []string
	proxyExtra string // lines added inside every reverse_proxy block (diagnostics)
	only       map[string]bool
	gobench    string
	out        string
	keep       bool

	// fairness subcommand: adds site L (limits)
	fairness bool

	// profile subcommand
	profileSeconds int
	profileDir     string
}

func main() {
	args := os.Args[1:]
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "upstream":
		upstreamMain(args)
	case "run", "profile", "fairness":
		cfg := parseFlags(cmd, args)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		var err error
		switch cmd {
		case "run":
			err = runBench(ctx, cfg)
		case "fairness":
			err = runFairness(ctx, cfg) // fairness.go
		default:
			err = runProfile(ctx, cfg)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "sidecarbench:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "usage: sidecarbench [run|profile|fairness|upstream] [flags]\n")
		os.Exit(2)
	}
}

func parseFlags(cmd string, args []string) *config {
	cfg := &config{}
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	fs.StringVar(&cfg.sidecarBin, "sidecar", "bin/supervaizer-sidecar", "the sidecar binary")
	fs.StringVar(&cfg.fixture, "fixture", "test/testdata/agent_interviewer_mvp.json", "the SDK fixture (action_request)")
	fs.IntVar(&cfg.concurrency, "concurrency", 16, "connections of the main run")
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "measured duration of one scenario in one round")
	fs.DurationVar(&cfg.warmup, "warmup", 400*time.Millisecond, "unmeasured warm-up before each measured window")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds of the main run (and of the latency run)")
	fs.IntVar(&cfg.latConcurrency, "latency-concurrency", 1, "connections of the latency run (0: none)")
	fs.DurationVar(&cfg.latDuration, "latency-duration", 1500*time.Millisecond, "measured duration in the latency run")
	scaling := fs.String("scaling", "1,8,32,64,256", "concurrency levels of the scaling run of B, C and D (empty: none)")
	fs.DurationVar(&cfg.scalingDuration, "scaling-duration", 2*time.Second, "measured duration in the scaling run")
	fs.IntVar(&cfg.scalingRounds, "scaling-rounds", 2, "rounds of the scaling run")
	fs.IntVar(&cfg.sseStreams, "sse-streams", 1000, "SSE streams held open for the RSS measurement (0: skip)")
	fs.DurationVar(&cfg.heartbeat, "heartbeat", 5*time.Second, "the bench agent's SSE heartbeat period")
	fs.IntVar(&cfg.tokens, "tokens", 20000, "distinct valid tokens for D (more than twice the cache's 10,000 entries: every request misses)")
	fs.Float64Var(&cfg.paced, "paced", 0, "main run: also B and D paced at this share of D's rate in each round (e.g. 0.5), D above B at one request rate (info); 0: off")
	fs.StringVar(&cfg.redis, "redis", "auto", "F-redis: auto (when redis-server is on PATH), on, off")
	fs.StringVar(&cfg.logMode, "log", "", "the audit log's output: file (a file in the temp dir), buffered (the same file behind `output buffered`, flushed every second) or discard; default: as -logconf ships (shipped: buffered, single: file)")
	fs.StringVar(&cfg.logConf, "logconf", "shipped", "the global log options on every side: shipped (Caddyfile.example's default and audit logs, reverse_proxy's logger excluded) or single (one default log holding every logger)")
	fs.BoolVar(&cfg.twin, "twin", true, "run: a second sidecar process serving B and C with reverse_proxy's logger the other way round (scenarios B-rplog, C-rplog with shipped; B-norplog, C-norplog with single)")
	fs.BoolVar(&cfg.admin, "admin", true, "run: Caddy's admin endpoint on a loopback port, for the per-request Go memory figures (/debug/vars); false: admin off")
	only := fs.String("only", "", "comma-separated scenarios to run (default all but the diagnostic B-hdr, C-nofwd, C-nohdr, C-compact)")
	fs.StringVar(&cfg.proxyExtra, "proxy-extra", "", "Caddyfile lines added inside every reverse_proxy block (diagnostics; \\n for newlines)")
	senv := fs.String("sidecar-env", "", "comma-separated NAME=value added to the sidecar's environment (e.g. GOGC=200)")
	fs.StringVar(&cfg.gobench, "gobench", "", "output of `go test -bench` to include (targets and JSON)")
	fs.StringVar(&cfg.out, "out", "", "JSON result file (default bench/results/<timestamp>.json)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the temp dir (Caddyfile, logs)")
	fs.IntVar(&cfg.profileSeconds, "seconds", 10, "profile: seconds of CPU profile per scenario")
	fs.StringVar(&cfg.profileDir, "profile-dir", "bench/results", "profile: where profiles are written")
	_ = fs.Parse(args)
	if cfg.logConf != "shipped" && cfg.logConf != "single" {
		fmt.Fprintf(os.Stderr, "bad -logconf %q (shipped or single)\n", cfg.logConf)
		os.Exit(2)
	}
	if *only != "" {
		cfg.only = map[string]bool{}
		for _, s := range strings.Split(*only, ",") {
			cfg.only[strings.TrimSpace(s)] = true
		}
	}
	cfg.proxyExtra = strings.ReplaceAll(cfg.proxyExtra, `\n`, "\n")
	for _, kv := range strings.Split(*senv, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			cfg.sidecarEnv = append(cfg.sidecarEnv, kv)
		}
	}
	for _, s := range strings.Split(*scaling, ",") {
		if s = strings.TrimSpace(s); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "bad -scaling level %q\n", s)
				os.Exit(2)
			}
			cfg.scaling = append(cfg.scaling, n)
		}
	}
	if cfg.out == "" && cmd == "run" {
		cfg.out = filepath.Join("bench", "results", time.Now().Format("20060102-150405")+".json")
	}
	return cfg
}

// prime checks each site answers as its scenario expects, warms C's and
// F's token, records the job.start that F replays, and captures B-ctx's
// headers (bctx.go) when the run includes it.
func (e *env) prime() error {
	for _, site := range []string{siteFMem, siteFRedis} {
		if _, ok := e.ports[site]; !ok {
			continue
		}
		resp, body, err := e.post(site, e.bodyStart, e.tokenOne)
		if err != nil {
			return err
		}
		if !forwardedOK(resp, body) || !strings.Contains(string(body), "strictly_idempotent_response") {
			return fmt.Errorf("%s: first job.start not recorded: %d %s", site, resp.StatusCode, body)
		}
		resp, body, err = e.post(site, e.bodyStart, e.tokenOne)
		if err != nil {
			return err
		}
		if resp.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
			return fmt.Errorf("%s: second job.start is not a replay: %d %s", site, resp.StatusCode, body)
		}
	}
	for _, c := range []struct {
		site, token string
		want        string
	}{{siteC, e.tokenOne, `"result"`}, {siteD, e.tokenPool[0], `"result"`}, {siteE, e.tokenBad[0], "workspace_authorization_bad_signature"}} {
		resp, body, err := e.post(c.site, e.bodySync, c.token)
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 || !strings.Contains(string(body), c.want) {
			return fmt.Errorf("site %s: unexpected answer %d %s", c.site, resp.StatusCode, body)
		}
	}
	if e.wantBCtx() {
		return e.primeBCtx()
	}
	return nil
}

// runBench is the default command: it starts the processes, measures the
// SSE streams and every load phase, then prints and writes the report.
func runBench(ctx context.Context, cfg *config) error {
	rep, err := newReport(cfg)
	if err != nil {
		return err
	}
	e, err := setup(ctx, cfg, cfg.admin)
	defer e.teardown()
	if err != nil {
		return err
	}
	e.recordIdle(rep)
	if err := e.freshSSE(ctx, rep); err != nil {
		return err
	}
	if err := e.prime(); err != nil {
		return err
	}
	if cfg.twin && (cfg.only == nil || cfg.only[siteB] || cfg.only[siteC]) {
		if err := e.startTwin(); err != nil {
			return err
		}
	}
	e.runPhases(ctx, rep)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if cfg.sseStreams > 0 {
		// The fan-out first: the proxied streams leave ~80 MiB of heap
		// the Go runtime keeps for a while.
		e.runSSE(ctx, rep, "after_load", siteCFan)
		e.runSSE(ctx, rep, "after_load", siteC)
	}
	e.finishReport(rep)
	rep.summarize(cfg)
	rep.print(cfg)
	return rep.write(cfg.out)
}

// newReport starts the report of a run: machine, configuration and the
// parsed -gobench file if any.
func newReport(cfg *config) (*report, error) {
	rep := &report{Started: time.Now(), Machine: machineInfo(), Config: cfg.summary()}
	if cfg.gobench != "" {
		gb, err := parseGoBench(cfg.gobench)
		if err != nil {
			return nil, err
		}
		rep.GoBench = gb
	}
	return rep, nil
}

// recordIdle records and prints the idle sidecar's memory.
func (e *env) recordIdle(rep *report) {
	idle := procMem(e.sidecar.pid())
	rep.SidecarIdleRSSMi = float64(idle.RSS) / 1024
	rep.SidecarIdleAnonMi, rep.SidecarIdleFileMi = float64(idle.Anon)/1024, float64(idle.File)/1024
	fmt.Printf("sidecar pid %d, idle RSS %.1f MiB (anon %.1f + file %.1f); upstream %s; redis %s\n", e.sidecar.pid(),
		rep.SidecarIdleRSSMi, rep.SidecarIdleAnonMi, rep.SidecarIdleFileMi, e.upstreamAddr, orNone(e.redisAddr))
}

// freshSSE measures the SSE streams of each site on a fresh sidecar (with
// -sse-streams): each in its own new sidecar process, so that one site's
// streams do not leave heap the other reuses.
func (e *env) freshSSE(ctx context.Context, rep *report) error {
	if e.cfg.sseStreams <= 0 {
		return nil
	}
	for _, site := range []string{siteB, siteC, siteCFan} {
		e.runSSE(ctx, rep, "fresh", site)
		if err := e.restartSidecar(); err != nil {
			return err
		}
	}
	return nil
}

// runPhases runs the main, latency and scaling phases into rep; a
// concurrency already measured is not measured again by scaling.
func (e *env) runPhases(ctx context.Context, rep *report) {
	cfg := e.cfg
	scen := e.scenarios()
	measured := map[int]bool{}
	phase := func(name string, conc, rounds int, dur time.Duration, list []scenario) {
		if conc <= 0 || rounds <= 0 || len(list) == 0 {
			return
		}
		measured[conc] = true
		e.runPhase(ctx, rep, name, conc, rounds, dur, list)
	}
	fmt.Printf("\n== main run: %d connections, %s per scenario, %d rounds (interleaved)\n", cfg.concurrency, cfg.duration, cfg.rounds)
	phase("main", cfg.concurrency, cfg.rounds, cfg.duration, scen)
	if cfg.latConcurrency > 0 && cfg.latConcurrency != cfg.concurrency {
		fmt.Printf("\n== latency run: %d connection(s), %s per scenario, %d rounds\n", cfg.latConcurrency, cfg.latDuration, cfg.rounds)
		phase("latency", cfg.latConcurrency, cfg.rounds, cfg.latDuration, scen)
	}
	scaleList := scalingScenarios(scen)
	for _, level := range cfg.scaling {
		if measured[level] {
			continue
		}
		fmt.Printf("\n== scaling run: %d connections, %s, %d rounds\n", level, cfg.scalingDuration, cfg.scalingRounds)
		phase("scaling", level, cfg.scalingRounds, cfg.scalingDuration, scaleList)
	}
}

// scalingScenarios are B, C and D of scen, those measured at every
// -scaling level.
func scalingScenarios(scen []scenario) []scenario {
	byName := map[string]scenario{}
	for _, s := range scen {
		byName[s.name] = s
	}
	var list []scenario
	for _, n := range []string{"B", "C", "D"} {
		if s, ok := byName[n]; ok {
			list = append(list, s)
		}
	}
	return list
}

// runPhase runs each scenario of list at conc for dur, rounds times
// interleaved, appending and printing each run, until ctx is done.
func (e *env) runPhase(ctx context.Context, rep *report, name string, conc, rounds int, dur time.Duration, list []scenario) {
	for r := 1; r <= rounds && ctx.Err() == nil; r++ {
		for _, s := range list {
			if ctx.Err() != nil {
				return
			}
			s, ok := paceRound(s, rep.Runs, name, r) // pace.go
			if !ok || (s.paceOf != "" && name != "main") {
				continue
			}
			res := e.runLoad(ctx, s, conc, e.cfg.warmup, dur)
			res.Round, res.Phase = r, name
			rep.Runs = append(rep.Runs, res)
			printRun(res, r, rounds)
		}
	}
}

// finishReport records the sidecar's final and peak memory, notes errors
// in its log, and the end time and load.
func (e *env) finishReport(rep *report) {
	rss, hwm := procStatus(e.sidecar.pid())
	rep.SidecarFinalRSSMi, rep.SidecarPeakRSSMi = float64(rss)/1024, float64(hwm)/1024
	if b, err := os.ReadFile(e.sidecar.errLog); err == nil && strings.Contains(string(b), `"level":"error"`) {
		rep.Notes = append(rep.Notes, "the sidecar logged errors: see its log (-keep)")
	}
	rep.Finished = time.Now()
	rep.Machine.LoadAvgEnd = loadAvg()
}

func (e *env) runSSE(ctx context.Context, rep *report, when, site string) {
	r, err := e.sseStreams(ctx, site, when, e.cfg.sseStreams, nil)
	if err != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("SSE %s via %s: %v", when, site, err))
	}
	rep.SSE = append(rep.SSE, r)
	fmt.Printf("SSE %-10s via %-5s: %d/%d streams open (agent sees %d) in %.1fs; sidecar RSS %.1f -> %.1f MiB (anon %.1f + file %.1f; %.1f KiB/stream), peak %.1f MiB\n",
		when, site, r.Opened, r.Streams, r.AtUpstream, r.OpenSeconds, r.RSSBeforeMi, r.RSSMi, r.AnonMi, r.FileMi, r.PerStreamKi, r.HWMMi)
}

func printRun(r runResult, round, rounds int) {
	flag := ""
	if r.Errors > 0 || r.Unexpected > 0 || !r.AgentOK {
		flag = fmt.Sprintf("  !! errors %d unexpected %d agent-calls %d (as expected: %v)", r.Errors, r.Unexpected, r.UpstreamCalls, r.AgentOK)
	}
	fmt.Printf("  %-7s c=%-3d round %d/%d: %8.0f req/s  p50 %7.0f µs  p99 %7.0f µs  sidecar %5.0f µs/req%s%s\n",
		r.Scenario, r.Concurrency, round, rounds, r.RPS, r.P50us, r.P99us, r.SidecarCPUus, fmtMetrics(r.Metrics), flag)
}

func fmtMetrics(m map[string]float64) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range []string{"token_cache_hit", "token_cache_miss", "deny_bad_signature", "idempotency_replay", "idempotency_forward"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, v))
		}
	}
	return "  [" + strings.Join(parts, " ") + "]"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
