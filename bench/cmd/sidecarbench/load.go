package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// scenario is one kind of request, sent to one site.
type scenario struct {
	name     string
	desc     string
	site     string      // "A" (the upstream itself) or a site of the Caddyfile
	body     []byte      // the POST /a2a body
	tokens   []string    // X-Supervaize-Workspace-Authorization values, used in turn
	headers  http.Header // sent on every request besides the key, the type and the token (B-ctx, bctx.go); nil: none
	forwards bool        // the agent is called for each request
	check    func(resp *http.Response, body []byte) bool
	// next picks the token of each request; it continues across runs, so
	// D's pool (larger than twice the cache) is walked in one order and
	// every token has been evicted before it comes back.
	next *atomic.Uint64
	// metrics are the gate counters whose change over the run is recorded.
	metrics []string
	// paceOf names the scenario whose rate, measured earlier in the same
	// round, this one is paced at (B@D: B at D's rate, pace.go); "": not
	// paced, a closed loop as fast as the answers come.
	paceOf string
	// paceShare is the share of paceOf's rate; rate is the paced rate of
	// one run (requests a second, all workers), set by runPhase.
	paceShare, rate float64
}

const (
	mCacheHit    = `supervaizer_sidecar_token_cache_total{result="hit"}`
	mCacheMiss   = `supervaizer_sidecar_token_cache_total{result="miss"}`
	mReplay      = `supervaizer_sidecar_idempotency_events_total{event="replay"}`
	mIdemForward = `supervaizer_sidecar_idempotency_events_total{event="forward"}`
	mBadSig      = `supervaizer_sidecar_decisions_total{code="workspace_authorization_bad_signature",outcome="deny",route="controller"}`
)

var (
	resultMark = []byte(`"result"`)
	errorMark  = []byte(`"error"`)
	badSigMark = []byte(`workspace_authorization_bad_signature`)
)

func forwardedOK(resp *http.Response, body []byte) bool {
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, resultMark) && !bytes.Contains(body, errorMark)
}

// scenarios returns A..F in their interleaving order.
func (e *env) scenarios() []scenario {
	bearer := func(toks ...string) []string {
		out := make([]string, len(toks))
		for i, t := range toks {
			out[i] = "Bearer " + t
		}
		return out
	}
	one := bearer(e.tokenOne)
	replayOK := func(resp *http.Response, body []byte) bool {
		return forwardedOK(resp, body) && resp.Header.Get("X-Supervaize-Idempotent-Replay") == "true"
	}
	list := []scenario{
		{name: "A", desc: "direct to the upstream", site: "A", body: e.bodySync, tokens: one, forwards: true, check: forwardedOK},
		{name: "B", desc: "plain Caddy reverse_proxy", site: siteB, body: e.bodySync, tokens: one, forwards: true, check: forwardedOK},
	}
	if e.ctxHeaders != nil {
		list = append(list, e.bctxScenario()) // bctx.go: B's neighbour, before C
	}
	list = append(list, []scenario{
		{name: "C", desc: "sidecar, job.sync, one token (cached)", site: siteC, body: e.bodySync, tokens: one, forwards: true,
			check: forwardedOK, metrics: []string{mCacheHit, mCacheMiss}},
		{name: "D", desc: "sidecar, job.sync, new token each request", site: siteD, body: e.bodySync, tokens: bearer(e.tokenPool...),
			forwards: true, check: forwardedOK, metrics: []string{mCacheHit, mCacheMiss}},
	}...)
	list = append(list, pacedPair(byName(list, "B"), byName(list, "D"), e.cfg.paced)...) // pace.go: right after D, with -paced
	list = append(list, []scenario{
		{name: "E", desc: "sidecar, bad signature refused", site: siteE, body: e.bodySync, tokens: bearer(e.tokenBad...),
			check: func(resp *http.Response, body []byte) bool {
				return resp.StatusCode == http.StatusOK && bytes.Contains(body, badSigMark)
			}, metrics: []string{mBadSig, mCacheMiss}},
		{name: "F-mem", desc: "sidecar, job.start replay, memory store", site: siteFMem, body: e.bodyStart, tokens: one,
			check: replayOK, metrics: []string{mReplay, mIdemForward}},
	}...)
	if e.redisAddr != "" {
		list = append(list, scenario{name: "F-redis", desc: "sidecar, job.start replay, redis store", site: siteFRedis,
			body: e.bodyStart, tokens: one, check: replayOK, metrics: []string{mReplay, mIdemForward}})
	}
	if e.cfg.only["B-hdr"] {
		list = append(list, scenario{name: "B-hdr", desc: "plain reverse_proxy adding the 10 verified headers",
			site: siteBHdr, body: e.bodySync, tokens: one, forwards: true, check: forwardedOK})
	}
	if e.cfg.only["C-nohdr"] {
		list = append(list, scenario{name: "C-nohdr", desc: "C with verified_headers off", site: siteCNoHdr,
			body: e.bodySync, tokens: one, forwards: true, check: forwardedOK})
	}
	if e.cfg.only["C-compact"] {
		list = append(list, scenario{name: "C-compact", desc: "C with verified_headers compact", site: siteCComp,
			body: e.bodySync, tokens: one, forwards: true, check: forwardedOK})
	}
	if e.cfg.only["C-nofwd"] {
		list = append(list, scenario{name: "C-nofwd", desc: "C with forward_token off", site: siteCNoFwd,
			body: e.bodySync, tokens: one, forwards: true, check: forwardedOK})
	}
	list = e.withTwins(list)
	var out []scenario
	for _, s := range list {
		want := e.cfg.only == nil || e.cfg.only[s.name] || (e.twin != nil && e.cfg.only[strings.TrimSuffix(s.name, e.twinSuffix())])
		if s.paceOf != "" {
			want = e.wantPaced(s) // pace.go
		}
		if want {
			s.next = new(atomic.Uint64)
			out = append(out, s)
		}
	}
	sharePoolWalk(out, "D", scenDPaced)
	return out
}

// withTwins inserts the twin process's scenarios (twinBases) after C, so
// that the four like-with-like runs are neighbours; list as it is without
// a twin.
func (e *env) withTwins(list []scenario) []scenario {
	if e.twin == nil {
		return list
	}
	var twins []scenario
	for _, base := range twinBases {
		for _, s := range list {
			if s.name == base {
				s.name, s.site = e.twinName(base), e.twinName(base)
				s.desc += ", reverse_proxy logger " + map[bool]string{true: "included", false: "excluded"}[e.cfg.logConf == "shipped"]
				s.metrics = nil // the metrics site is the main process's
				twins = append(twins, s)
			}
		}
	}
	at := slices.IndexFunc(list, func(s scenario) bool { return s.name == "C" }) + 1
	return slices.Insert(list, at, twins...)
}

// byName is the scenario of list called name.
func byName(list []scenario, name string) scenario {
	return list[slices.IndexFunc(list, func(s scenario) bool { return s.name == name })]
}

// sharePoolWalk gives scenario b the token counter of scenario a, so that
// the two walk one token pool in one order (D and D-paced: every token is
// evicted before it comes back).
func sharePoolWalk(list []scenario, a, b string) {
	ia := slices.IndexFunc(list, func(s scenario) bool { return s.name == a })
	ib := slices.IndexFunc(list, func(s scenario) bool { return s.name == b })
	if ia >= 0 && ib >= 0 {
		list[ib].next = list[ia].next
	}
}

// runResult is one measured run of one scenario at one concurrency.
type runResult struct {
	Scenario    string  `json:"scenario"`
	Concurrency int     `json:"concurrency"`
	Round       int     `json:"round"`
	Phase       string  `json:"phase"` // main, latency, scaling, profile
	Seconds     float64 `json:"seconds"`
	Requests    int64   `json:"requests"` // completed in the window, answer as expected
	Errors      int64   `json:"errors"`   // transport errors in the window
	Unexpected  int64   `json:"unexpected"`
	RPS         float64 `json:"rps"`
	PacedRPS    float64 `json:"paced_rps,omitempty"` // a paced run's target rate (pace.go)
	P50us       float64 `json:"p50_us"`
	P90us       float64 `json:"p90_us"`
	P99us       float64 `json:"p99_us"`
	P999us      float64 `json:"p999_us"`
	MeanUs      float64 `json:"mean_us"`
	MaxUs       float64 `json:"max_us"`
	// CPU time per request in the window, by process (µs), from /proc.
	SidecarCPUus  float64 `json:"sidecar_cpu_us_per_req"`
	UpstreamCPUus float64 `json:"upstream_cpu_us_per_req"`
	ClientCPUus   float64 `json:"client_cpu_us_per_req"`
	RedisCPUus    float64 `json:"redis_cpu_us_per_req,omitempty"`
	// System calls of the sidecar per request in the window (read and
	// write family), from /proc/<pid>/io syscr and syscw.
	SidecarSyscR float64 `json:"sidecar_syscr_per_req"`
	SidecarSyscW float64 `json:"sidecar_syscw_per_req"`
	// Go memory of the sidecar process per request in the window, from the
	// admin endpoint's memstats (procstats.go; 0 without -admin): heap
	// allocations and bytes, GCs per 1,000 requests, stop-the-world pause,
	// and the GC's share of the process's CPU (an estimate, see goMem).
	SidecarAllocsPerReq     float64 `json:"sidecar_allocs_per_req"`
	SidecarAllocBytesPerReq float64 `json:"sidecar_alloc_bytes_per_req"`
	SidecarGCsPer1kReq      float64 `json:"sidecar_gcs_per_1k_req"`
	SidecarGCPauseUsPerReq  float64 `json:"sidecar_gc_pause_us_per_req"`
	SidecarGCCPUShare       float64 `json:"sidecar_gc_cpu_share"`
	// Whole run (warm-up included): answers received and agent calls seen.
	Answered      int64              `json:"answered_total"`
	UpstreamCalls int64              `json:"upstream_calls"`
	AgentOK       bool               `json:"agent_calls_as_expected"`
	Metrics       map[string]float64 `json:"gate_metrics_delta,omitempty"`
}

// runLoad drives scenario s with conc workers (one keep-alive connection
// each) for warmup+dur, and measures the requests that complete inside the
// dur window: count, latency percentiles, CPU per request of each process.
func (e *env) runLoad(ctx context.Context, s scenario, conc int, warmup, dur time.Duration) runResult {
	client, tr := loadClient(conc)
	defer tr.CloseIdleConnections()
	lr := newLoadRun(client, e.url(s.site, "/a2a"), s).withWorkers(conc)

	before, _ := e.upstreamCount()
	mBefore := e.metricsSnapshot(s.metrics)

	lr.winStart = time.Now().Add(warmup)
	lr.winEnd = lr.winStart.Add(dur)
	outs := make([]workerOut, conc)
	var wg sync.WaitGroup
	for w := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lr.work(ctx, &outs[w], w, conc)
		}()
	}
	use := e.sampleWindow(s.site, lr.winStart, lr.winEnd)
	wg.Wait()

	after, _ := e.upstreamCount()
	r := runResult{Scenario: s.name, Concurrency: conc, Seconds: dur.Seconds(), Metrics: e.metricsDelta(mBefore, s.metrics)}
	lat := r.addWorkers(outs)
	r.UpstreamCalls = after.A2A - before.A2A
	if s.forwards {
		r.AgentOK = r.UpstreamCalls >= r.Answered
	} else {
		r.AgentOK = r.UpstreamCalls == 0
	}
	r.RPS = float64(r.Requests) / dur.Seconds()
	r.PacedRPS = s.rate
	r.setLatency(lat)
	r.setUsage(use, e.redis != nil && strings.HasPrefix(s.name, "F-redis"))
	return r
}

// loadClient is the HTTP client of one run: keep-alive connections for
// conc workers, no compression. Close the transport's idle connections
// when the run ends.
func loadClient(conc int) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conc * 2,
		MaxIdleConnsPerHost: conc * 2,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr
}

// loadRun is what the workers of one run share: the request to send
// (tokens taken in turn through next) and the measured window.
type loadRun struct {
	client           *http.Client
	req              *http.Request // template: method and URL
	s                scenario
	values           [][]string // one header value per token
	keyV, ctV        []string
	next             *atomic.Uint64
	winStart, winEnd time.Time
	interval         time.Duration // paced (s.rate > 0): one worker's time between two sends
}

// workerOut is what one worker counted: latencies (ns) and counts of the
// window, and the good answers of the whole run.
type workerOut struct {
	lat                    []int64
	ok, errs, bad, answers int64
}

// newLoadRun prepares the requests of scenario s to target; the window is
// set by the caller.
func newLoadRun(client *http.Client, target string, s scenario) *loadRun {
	u, err := http.NewRequest(http.MethodPost, target, nil)
	if err != nil {
		panic(err)
	}
	values := make([][]string, len(s.tokens))
	for i, t := range s.tokens {
		values[i] = []string{t}
	}
	next := s.next
	if next == nil {
		next = new(atomic.Uint64)
	}
	return &loadRun{client: client, req: u, s: s, values: values,
		keyV: []string{benchWriteKey}, ctV: []string{"application/json"}, next: next}
}

// withWorkers sets the pacing of a paced scenario for conc workers.
func (lr *loadRun) withWorkers(conc int) *loadRun {
	if lr.s.rate > 0 && conc > 0 {
		lr.interval = time.Duration(float64(conc) / lr.s.rate * float64(time.Second))
	}
	return lr
}

// work is one worker: it sends requests one after the other until the
// window ends or ctx is done, counting into o those that start and end
// inside the window.
func (lr *loadRun) work(ctx context.Context, o *workerOut, w, conc int) {
	o.lat = make([]int64, 0, 4096)
	var buf bytes.Buffer
	p := lr.pacer(w, conc)
	for ctx.Err() == nil {
		p.wait()
		t0 := time.Now()
		if t0.After(lr.winEnd) {
			return
		}
		req := lr.request(ctx)
		t0 = time.Now()
		resp, err := lr.client.Do(req)
		if err != nil {
			if t0.After(lr.winStart) && ctx.Err() == nil {
				o.errs++
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		buf.Reset()
		_, rerr := buf.ReadFrom(resp.Body)
		resp.Body.Close()
		t1 := time.Now()
		good := rerr == nil && lr.s.check(resp, buf.Bytes())
		if good {
			o.answers++
		}
		if t0.Before(lr.winStart) || t1.After(lr.winEnd) {
			continue
		}
		if !good {
			o.bad++
			continue
		}
		o.ok++
		o.lat = append(o.lat, int64(t1.Sub(t0)))
	}
}

// request is the next request of the scenario, with the next token.
func (lr *loadRun) request(ctx context.Context) *http.Request {
	var h http.Header
	if len(lr.s.headers) == 0 {
		h = http.Header{"X-Api-Key": lr.keyV, "Content-Type": lr.ctV}
	} else {
		h = make(http.Header, 3+len(lr.s.headers))
		h["X-Api-Key"], h["Content-Type"] = lr.keyV, lr.ctV
		for k, v := range lr.s.headers {
			h[k] = v // shared, read-only: the client only writes them
		}
	}
	if len(lr.values) > 0 {
		h["X-Supervaize-Workspace-Authorization"] = lr.values[lr.next.Add(1)%uint64(len(lr.values))]
	}
	req := lr.req.WithContext(ctx)
	req.Header = h
	req.Body = io.NopCloser(bytes.NewReader(lr.s.body))
	req.ContentLength = int64(len(lr.s.body))
	return req
}

// windowUsage is what the processes spent between the window's two ends:
// CPU ticks by role, the sidecar's system calls and its Go memory.
type windowUsage struct {
	cpu0, cpu1 map[string]int64
	io0, io1   [2]int64
	mem0, mem1 goMem
}

// sampleWindow waits for the window's start and end and samples the CPU,
// system calls and Go memory of each process at both; "sidecar" is the
// process serving the site (the twin for its sites).
func (e *env) sampleWindow(site string, winStart, winEnd time.Time) windowUsage {
	proc, admin := e.procOf(site)
	gmp := e.cfg.sidecarGOMAXPROCS()
	pids := map[string]int{"sidecar": proc.pid(), "upstream": e.upstream.pid(), "client": os.Getpid()}
	if e.redis != nil {
		pids["redis"] = e.redis.pid()
	}
	var u windowUsage
	time.Sleep(time.Until(winStart))
	u.cpu0, u.io0, u.mem0 = cpuTicks(pids), procSyscalls(proc.pid()), readGoMem(proc.pid(), admin, gmp)
	time.Sleep(time.Until(winEnd))
	u.cpu1, u.io1, u.mem1 = cpuTicks(pids), procSyscalls(proc.pid()), readGoMem(proc.pid(), admin, gmp)
	return u
}

// addWorkers sums the workers' counts into r and returns all their
// window latencies (ns).
func (r *runResult) addWorkers(outs []workerOut) []int64 {
	var lat []int64
	for _, o := range outs {
		r.Requests += o.ok
		r.Errors += o.errs
		r.Unexpected += o.bad
		r.Answered += o.answers
		lat = append(lat, o.lat...)
	}
	return lat
}

// setLatency sets the percentiles, mean and maximum (µs) of lat (ns),
// which it sorts.
func (r *runResult) setLatency(lat []int64) {
	slices.Sort(lat)
	r.P50us, r.P90us, r.P99us, r.P999us = pct(lat, 0.50), pct(lat, 0.90), pct(lat, 0.99), pct(lat, 0.999)
	if len(lat) > 0 {
		var sum int64
		for _, v := range lat {
			sum += v
		}
		r.MeanUs = float64(sum) / float64(len(lat)) / 1e3
		r.MaxUs = float64(lat[len(lat)-1]) / 1e3
	}
}

// setUsage sets the per-request CPU, system calls and Go memory of the
// window from u (none without requests); redis's CPU when withRedis.
func (r *runResult) setUsage(u windowUsage, withRedis bool) {
	if r.Requests == 0 {
		return
	}
	per := func(name string) float64 {
		return float64(u.cpu1[name]-u.cpu0[name]) * (1e6 / clockTicks) / float64(r.Requests)
	}
	r.SidecarCPUus, r.UpstreamCPUus, r.ClientCPUus = per("sidecar"), per("upstream"), per("client")
	r.SidecarSyscR = float64(u.io1[0]-u.io0[0]) / float64(r.Requests)
	r.SidecarSyscW = float64(u.io1[1]-u.io0[1]) / float64(r.Requests)
	r.setGoMem(u.mem0, u.mem1, float64(u.cpu1["sidecar"]-u.cpu0["sidecar"])/clockTicks)
	if withRedis {
		r.RedisCPUus = per("redis")
	}
}

// pct is the q-quantile of sorted nanosecond samples, in µs.
func pct(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / 1e3
}

func (e *env) metricsSnapshot(names []string) map[string]float64 {
	if len(names) == 0 {
		return nil
	}
	m, err := e.sidecarMetrics()
	if err != nil {
		return nil
	}
	return m
}

func (e *env) metricsDelta(before map[string]float64, names []string) map[string]float64 {
	if before == nil {
		return nil
	}
	after, err := e.sidecarMetrics()
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, n := range names {
		out[shortMetric(n)] = after[n] - before[n]
	}
	return out
}

func shortMetric(n string) string {
	switch n {
	case mCacheHit:
		return "token_cache_hit"
	case mCacheMiss:
		return "token_cache_miss"
	case mReplay:
		return "idempotency_replay"
	case mIdemForward:
		return "idempotency_forward"
	case mBadSig:
		return "deny_bad_signature"
	}
	return n
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times.
var clockTicks = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && v > 0 {
			return float64(v)
		}
	}
	return 100
}()

// cpuTicks reads utime+stime of each pid.
func cpuTicks(pids map[string]int) map[string]int64 {
	out := map[string]int64{}
	for name, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[name] = ut + st
	}
	return out
}

// procSyscalls reads syscr and syscw (read- and write-family system calls
// made so far) of pid from /proc/<pid>/io; zeros when it cannot.
func procSyscalls(pid int) (rw [2]int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return rw
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "syscr":
			rw[0] = n
		case "syscw":
			rw[1] = n
		}
	}
	return rw
}

// memStatus is the memory of a process from /proc/<pid>/status, in KiB:
// VmRSS = RssAnon (heap, stacks) + RssFile (the binary's mapped pages,
// shared and reclaimable) + RssShmem; VmHWM is the peak VmRSS.
type memStatus struct {
	RSS, HWM, Anon, File int64
}

func procMem(pid int) memStatus {
	var m memStatus
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			m.RSS = v
		case "VmHWM:":
			m.HWM = v
		case "RssAnon:":
			m.Anon = v
		case "RssFile:":
			m.File = v
		}
	}
	return m
}

// procStatus reads VmRSS and VmHWM (KiB) of pid.
func procStatus(pid int) (rss, hwm int64) {
	m := procMem(pid)
	return m.RSS, m.HWM
}
