package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// runProfile starts the same deployment with Caddy's admin endpoint on a
// loopback port (the only difference from the load run), and:
//   - with -sse-streams > 0, a memory breakdown of the fresh sidecar process
//     with that many SSE streams open through C (Go memstats from
//     /debug/vars, goroutines, a heap profile: inuse_space top);
//   - for each selected scenario (-only, default C,D,F-mem; "SSE" alone
//     selects none), drives it at -concurrency while taking a CPU profile of
//     the sidecar process from /debug/pprof/profile, writes
//     <dir>/<timestamp>-<scenario>.cpu.pprof and prints `go tool pprof -top`,
//     and, over the same window, the allocations (a delta of
//     /debug/pprof/allocs: <timestamp>-<scenario>.allocs.pprof, top by
//     alloc_space);
//   - the gate's own CPU per request of each gate scenario and, side by
//     side for every scenario, reverse_proxy's and the GC's parts
//     (profilecost.go), each profile scaled to the process's CPU from
//     /proc over its window (the load's measured window: the profile
//     starts with it and lasts as long);
//   - after the loads, the memory breakdown again (after_load).
func runProfile(ctx context.Context, cfg *config) error {
	if cfg.only == nil {
		cfg.only = map[string]bool{"B": true, "C": true, "D": true, "F-mem": true}
	}
	e, err := setup(ctx, cfg, true)
	defer e.teardown()
	if err != nil {
		return err
	}
	if err := e.prime(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
		return err
	}
	stamp := time.Now().Format("20060102-150405")
	if cfg.sseStreams > 0 {
		if err := e.memDiag(ctx, stamp, "fresh"); err != nil {
			return err
		}
	}
	secs := cfg.profileSeconds
	loads := 0
	profiles := map[string]string{}  // scenario -> CPU profile
	requests := map[string]float64{} // scenario -> requests in the window
	var costs []profScenario         // profilecost.go
	for _, s := range e.scenarios() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.paceOf != "" { // the paced pair is the load run's (pace.go)
			continue
		}
		loads++
		path, res, err := e.profileScenario(ctx, s, stamp)
		if err != nil {
			return err
		}
		profiles[s.name], requests[s.name] = path, float64(res.Requests)
		p, err := loadProfScenario(cfg.sidecarBin, path, res)
		if err != nil {
			fmt.Printf("%s: the profile's parts per request: %v\n", s.name, err)
			continue
		}
		costs = append(costs, p)
	}
	for _, p := range costs {
		if p.Own != nil {
			printOwnCost(p)
		}
	}
	printCostTable(costs)
	if profiles["B"] != "" && profiles["C"] != "" {
		// Same process, same global options, same bytes, same seconds: at
		// saturation both windows burn the same CPU, so the diff is where
		// C's CPU goes that B's does not (per request: divide by C's
		// requests; B's window served B/C times more).
		fmt.Printf("\n== CPU profile diff C vs B (go tool pprof -top -diff_base %s %s %s): B %.0f requests, C %.0f requests in %d s\n",
			profiles["B"], cfg.sidecarBin, profiles["C"], requests["B"], requests["C"], secs)
		pprofTop(cfg.sidecarBin, profiles["C"], "-diff_base", profiles["B"], "-nodecount", "40")
	}
	if cfg.sseStreams > 0 && loads > 0 {
		return e.memDiag(ctx, stamp, "after_load")
	}
	return nil
}

// profileScenario runs scenario s's load while the sidecar takes its CPU
// and allocation profiles over the measured window, prints their tops and
// returns the CPU profile's path and the load's result.
func (e *env) profileScenario(ctx context.Context, s scenario, stamp string) (string, runResult, error) {
	cfg, secs := e.cfg, e.cfg.profileSeconds
	path := filepath.Join(cfg.profileDir, fmt.Sprintf("%s-%s.cpu.pprof", stamp, s.name))
	allocs := filepath.Join(cfg.profileDir, fmt.Sprintf("%s-%s.allocs.pprof", stamp, s.name))
	errc := make(chan error, 2)
	for _, f := range []struct{ path, url string }{
		{path, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)},
		{allocs, fmt.Sprintf("/debug/pprof/allocs?seconds=%d", secs)}, // a delta over the same window
	} {
		go func() {
			time.Sleep(cfg.warmup) // the profiles cover the load's measured window
			errc <- e.fetch(f.path, f.url, time.Duration(secs+30)*time.Second)
		}()
	}
	res := e.runLoad(ctx, s, cfg.concurrency, cfg.warmup, time.Duration(secs)*time.Second)
	res.Phase = "profile"
	printRun(res, 1, 1)
	for range 2 {
		if err := <-errc; err != nil {
			return "", res, err
		}
	}
	fmt.Printf("\n== %s: %s (go tool pprof -top -nodecount 40 %s %s)\n", s.name, path, cfg.sidecarBin, path)
	pprofTop(cfg.sidecarBin, path, "-nodecount", "40")
	fmt.Printf("\n== %s: allocations in the same window, %s (go tool pprof -top -sample_index=alloc_space -nodecount 25)\n", s.name, allocs)
	pprofTop(cfg.sidecarBin, allocs, "-sample_index=alloc_space", "-nodecount", "25")
	return path, res, nil
}

func pprofTop(bin, path string, args ...string) {
	cmd := exec.Command("go", append(append([]string{"tool", "pprof", "-top"}, args...), bin, path)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	_ = cmd.Run()
}

// memDiag prints the sidecar's Go memory with and without SSE streams open.
func (e *env) memDiag(ctx context.Context, stamp, when string) error {
	show := func(label string) {
		rss, _ := procStatus(e.sidecar.pid())
		ms, err := e.memstats()
		if err != nil {
			fmt.Println("memstats:", err)
			return
		}
		mib := func(k string) float64 { return ms[k] / (1 << 20) }
		fmt.Printf("%-28s RSS %6.1f MiB | Go Sys %6.1f  HeapInuse %6.1f  HeapIdle %6.1f  HeapReleased %6.1f  StackInuse %6.1f  MSpan+MCache %4.1f  GCSys %4.1f  OtherSys %4.1f MiB | goroutines %d\n",
			label, float64(rss)/1024, mib("Sys"), mib("HeapInuse"), mib("HeapIdle"), mib("HeapReleased"), mib("StackInuse"),
			mib("MSpanInuse")+mib("MCacheInuse"), mib("GCSys"), mib("OtherSys"), e.goroutines())
	}
	fmt.Printf("\n== memory, %s (%d SSE streams through C, read key, no workspace token)\n", when, e.cfg.sseStreams)
	show("no streams")
	heap := filepath.Join(e.cfg.profileDir, fmt.Sprintf("%s-%s-sse.heap.pprof", stamp, when))
	_, err := e.sseStreams(ctx, siteC, when, e.cfg.sseStreams, func() {
		show(fmt.Sprintf("%d streams open", e.cfg.sseStreams))
		if err := e.fetch(heap, "/debug/pprof/heap?gc=1", 30*time.Second); err != nil {
			fmt.Println("heap profile:", err)
			return
		}
		fmt.Printf("heap profile %s (inuse_space):\n", heap)
		pprofTop(e.cfg.sidecarBin, heap, "-sample_index=inuse_space", "-nodecount", "15")
	})
	return err
}

func (e *env) memstats() (map[string]float64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/vars", e.adminPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		Memstats map[string]any `json:"memstats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for k, x := range v.Memstats {
		if f, ok := x.(float64); ok {
			out[k] = f
		}
	}
	return out, nil
}

func (e *env) goroutines() int {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=1", e.adminPort))
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	var n int
	line, _, _ := strings.Cut(string(b), "\n")
	_, _ = fmt.Sscanf(line, "goroutine profile: total %d", &n)
	return n
}

func (e *env) fetch(path, urlPath string, timeout time.Duration) error {
	url := fmt.Sprintf("http://127.0.0.1:%d%s", e.adminPort, urlPath)
	resp, err := (&http.Client{Timeout: timeout}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %d %s", urlPath, resp.StatusCode, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
