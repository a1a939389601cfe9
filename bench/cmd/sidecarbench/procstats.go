package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// goMem is a sidecar process's Go memory statistics at one instant, read
// from Caddy's admin endpoint (/debug/vars, expvar's runtime.MemStats; the
// admin endpoint listens on loopback only).
type goMem struct {
	Mallocs, TotalAlloc, NumGC, PauseTotalNs float64
	// GCCPUSeconds estimates the GC's CPU time since the process started,
	// as of the end of the last GC: GCCPUFraction (GC CPU over the CPU
	// available since start) x GOMAXPROCS x (LastGC - process start).
	GCCPUSeconds float64
	ok           bool
}

// readGoMem reads the memstats of the process pid through its admin port.
func readGoMem(pid, admin int, gomaxprocs int) goMem {
	if admin == 0 {
		return goMem{}
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/vars", admin))
	if err != nil {
		return goMem{}
	}
	defer resp.Body.Close()
	var v struct {
		Memstats struct {
			Mallocs, TotalAlloc, NumGC, PauseTotalNs, LastGC float64
			GCCPUFraction                                    float64
		} `json:"memstats"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return goMem{}
	}
	m := v.Memstats
	g := goMem{Mallocs: m.Mallocs, TotalAlloc: m.TotalAlloc, NumGC: m.NumGC, PauseTotalNs: m.PauseTotalNs, ok: true}
	if start, ok := procStart(pid); ok && m.LastGC > 0 {
		g.GCCPUSeconds = m.GCCPUFraction * float64(gomaxprocs) * max(0, m.LastGC/1e9-start)
	}
	return g
}

// procStart is the start time of pid in Unix seconds (a clock tick's
// precision), from /proc/<pid>/stat starttime and /proc/stat btime.
func procStart(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 20 {
		return 0, false
	}
	ticks, err := strconv.ParseFloat(f[19], 64)
	if err != nil {
		return 0, false
	}
	st, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			bt, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return bt + ticks/clockTicks, err == nil
		}
	}
	return 0, false
}

// sidecarGOMAXPROCS is the sidecar's GOMAXPROCS: GOMAXPROCS from
// -sidecar-env, else this process's (the same machine and cgroup).
func (c *config) sidecarGOMAXPROCS() int {
	for _, kv := range c.sidecarEnv {
		if v, ok := strings.CutPrefix(kv, "GOMAXPROCS="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	return runtime.GOMAXPROCS(0)
}

// setGoMem fills r's per-request Go memory figures from the memstats at the
// window's start and end; cpuSeconds is the process's CPU in the window.
func (r *runResult) setGoMem(m0, m1 goMem, cpuSeconds float64) {
	if !m0.ok || !m1.ok || r.Requests == 0 {
		return
	}
	n := float64(r.Requests)
	r.SidecarAllocsPerReq = (m1.Mallocs - m0.Mallocs) / n
	r.SidecarAllocBytesPerReq = (m1.TotalAlloc - m0.TotalAlloc) / n
	r.SidecarGCsPer1kReq = (m1.NumGC - m0.NumGC) * 1000 / n
	r.SidecarGCPauseUsPerReq = (m1.PauseTotalNs - m0.PauseTotalNs) / 1e3 / n
	if cpuSeconds > 0 && m1.GCCPUSeconds > 0 {
		r.SidecarGCCPUShare = max(0, m1.GCCPUSeconds-m0.GCCPUSeconds) / cpuSeconds
	}
}
