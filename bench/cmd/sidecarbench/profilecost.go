// The gate's own CPU per request, from the CPU profiles of `sidecarbench
// profile` (profile.go): the samples under gate.(*Gate).Serve minus those
// under its call to next (gate.(*Gate).pass → reverse_proxy), turned into
// process CPU per request with the window's /proc figures; beside it, for
// every profiled scenario, reverse_proxy's part and the background GC's.
// The profiles are read through `go tool pprof -top` (the module has no
// pprof package), whose text parsePprofTop reads.

package main

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Functions of the profiles, as pprof names them without their package
// path (funcIs).
const (
	fnGateServe    = "gate.(*Gate).Serve"
	fnReverseProxy = "reverseproxy.(*Handler).ServeHTTP"
	fnGCBgMark     = "runtime.gcBgMarkWorker"
)

// ownTopN is how many functions of the gate's own part are listed.
const ownTopN = 12

// pprofRow is one function of `go tool pprof -top`: its flat and
// cumulative samples, in seconds of CPU.
type pprofRow struct {
	Name      string
	Flat, Cum float64
}

// pprofTable is a parsed `go tool pprof -top`: the profile's total samples
// (seconds; the whole profile's, before any -focus or -ignore) and its rows.
type pprofTable struct {
	Total float64
	Rows  []pprofRow
}

// parsePprofTop reads the text of `go tool pprof -top`: the total from
// "Duration: …, Total samples = X" (or, without it, "… of X total"), then
// every row after the "flat flat% sum% cum cum%" heading. A function pprof
// lists twice (inlined somewhere, not elsewhere) is one row, its samples
// summed.
func parsePprofTop(text string) (pprofTable, error) {
	var t pprofTable
	var haveTotal, inRows bool
	index := map[string]int{}
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		switch {
		case inRows && len(f) >= 6:
			flat, err1 := parsePprofValue(f[0])
			cum, err2 := parsePprofValue(f[3])
			if err1 != nil || err2 != nil {
				return t, fmt.Errorf("pprof row %q: %v %v", line, err1, err2)
			}
			name := strings.TrimSuffix(strings.Join(f[5:], " "), " (inline)")
			if i, ok := index[name]; ok {
				t.Rows[i].Flat += flat
				t.Rows[i].Cum += cum
				continue
			}
			index[name] = len(t.Rows)
			t.Rows = append(t.Rows, pprofRow{Name: name, Flat: flat, Cum: cum})
		case len(f) == 5 && f[0] == "flat" && f[4] == "cum%":
			inRows = true
		case !haveTotal && strings.HasPrefix(line, "Duration:"):
			_, v, ok := strings.Cut(line, "Total samples = ")
			if !ok {
				continue
			}
			tot, err := parsePprofValue(strings.Fields(v)[0])
			if err != nil {
				return t, fmt.Errorf("pprof total %q: %w", line, err)
			}
			t.Total, haveTotal = tot, true
		case !haveTotal && strings.HasPrefix(line, "Showing nodes accounting for ") && strings.HasSuffix(line, " total"):
			tot, err := parsePprofValue(f[len(f)-2])
			if err != nil {
				return t, fmt.Errorf("pprof total %q: %w", line, err)
			}
			t.Total, haveTotal = tot, true
		}
	}
	if !haveTotal || !inRows {
		return t, fmt.Errorf("not the output of pprof -top (total found: %v, rows found: %v)", haveTotal, inRows)
	}
	return t, nil
}

// pprofUnits are the time units pprof prints a CPU profile's values in
// (its measurement package), in seconds.
var pprofUnits = []struct {
	suffix string
	sec    float64
}{{"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6}, {"μs", 1e-6}, {"ms", 1e-3}, {"hrs", 3600}, {"s", 1}}

// parsePprofValue reads one value of pprof's text ("1.20s", "10ms", "0").
func parsePprofValue(s string) (float64, error) {
	if s == "0" {
		return 0, nil
	}
	for _, u := range pprofUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("pprof value %q: %w", s, err)
			}
			return v * u.sec, nil
		}
	}
	return 0, fmt.Errorf("pprof value %q: unknown unit", s)
}

// funcIs reports whether pprof's full function name (with its package
// path) is the function short (package name, receiver and function).
func funcIs(full, short string) bool {
	return full == short || strings.HasSuffix(full, "/"+short)
}

// funcRegexp is a pprof -focus/-ignore expression matching exactly short
// (funcIs's rule).
func funcRegexp(short string) string {
	return "(^|/)" + regexp.QuoteMeta(short) + "$"
}

// cum is the cumulative samples of the function short.
func (t pprofTable) cum(short string) float64 {
	var s float64
	for _, r := range t.Rows {
		if funcIs(r.Name, short) {
			s += r.Cum
		}
	}
	return s
}

// topFlat is the n rows with the most flat samples, most first.
func (t pprofTable) topFlat(n int) []pprofRow {
	rows := slices.Clone(t.Rows)
	slices.SortStableFunc(rows, func(a, b pprofRow) int { return cmp.Compare(b.Flat, a.Flat) })
	return rows[:min(n, len(rows))]
}

// topCumBelow is the n rows with the most cumulative samples among those
// below root (cumulative samples under root's, root itself and its callers
// left out), most first.
func (t pprofTable) topCumBelow(root string, n int) []pprofRow {
	top := t.cum(root)
	var rows []pprofRow
	for _, r := range t.Rows {
		if r.Cum < top && !funcIs(r.Name, root) {
			rows = append(rows, r)
		}
	}
	slices.SortStableFunc(rows, func(a, b pprofRow) int { return cmp.Compare(b.Cum, a.Cum) })
	return rows[:min(n, len(rows))]
}

// profWindow is what one profiled scenario's window measured: the
// requests answered as expected, the sidecar process's CPU from /proc
// (µs) and the profile's samples (s).
type profWindow struct {
	Requests float64
	CPUus    float64
	Samples  float64
}

// windowOf is the window of res (one run of runProfile) and its profile.
func windowOf(res runResult, t pprofTable) profWindow {
	return profWindow{Requests: float64(res.Requests), CPUus: res.SidecarCPUus * float64(res.Requests), Samples: t.Total}
}

// scale is the process's CPU per second of profile samples (≈ 1 when the
// profile sees all of the process's CPU).
func (w profWindow) scale() float64 {
	if w.Samples <= 0 {
		return 0
	}
	return w.CPUus / 1e6 / w.Samples
}

// usPerReq turns samples (s) of the window's profile into process CPU per
// request (µs): samples × (process CPU ÷ profile samples) ÷ requests.
func (w profWindow) usPerReq(samples float64) float64 {
	if w.Requests <= 0 {
		return 0
	}
	return samples * 1e6 * w.scale() / w.Requests
}

// profScenario is one profiled scenario: its window, its whole profile and,
// for a gate scenario, the gate's own part (under Serve, not under next).
type profScenario struct {
	Name   string
	Window profWindow
	All    pprofTable
	Own    *pprofTable // nil: no samples under gate.(*Gate).Serve
}

// loadProfScenario reads the profile at path of scenario res.
func loadProfScenario(bin, path string, res runResult) (profScenario, error) {
	all, err := readPprofTop(bin, path)
	if err != nil {
		return profScenario{}, err
	}
	p := profScenario{Name: res.Scenario, Window: windowOf(res, all), All: all}
	if all.cum(fnGateServe) == 0 {
		return p, nil
	}
	own, err := readPprofTop(bin, path, "-focus", funcRegexp(fnGateServe), "-ignore", funcRegexp(fnReverseProxy))
	if err != nil {
		return p, err
	}
	p.Own = &own
	return p, nil
}

// readPprofTop runs `go tool pprof -top` on the profile at path, every
// node shown, with args (filters), and parses it.
func readPprofTop(bin, path string, args ...string) (pprofTable, error) {
	full := append([]string{"tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0"}, args...)
	cmd := exec.Command("go", append(full, bin, path)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return pprofTable{}, fmt.Errorf("go tool pprof %s: %w", path, err)
	}
	return parsePprofTop(out.String())
}

// printOwnCost prints the gate's own CPU per request of p (a gate
// scenario) and the functions of that part, per request.
func printOwnCost(p profScenario) {
	w, own := p.Window, p.Own
	serve, ownS := p.All.cum(fnGateServe), own.cum(fnGateServe)
	fmt.Printf("\n== %s: the gate's own CPU per request (samples under %s, minus those under its call to next, %s):\n",
		p.Name, fnGateServe, fnReverseProxy)
	fmt.Printf("   %.0f requests; process CPU (/proc) %.3f s, profile samples %.3f s: scale %.3f\n",
		w.Requests, w.CPUus/1e6, w.Samples, w.scale())
	fmt.Printf("   %s %.1f µs/req − under next %.1f µs/req = gate's own %.1f µs/req\n",
		fnGateServe, w.usPerReq(serve), w.usPerReq(serve-ownS), w.usPerReq(ownS))
	fmt.Printf("   top %d functions of the own part, by flat (µs/req, share of the own part):\n", ownTopN)
	for _, r := range own.topFlat(ownTopN) {
		fmt.Printf("     %7.2f  %5.1f%%  %s\n", w.usPerReq(r.Flat), 100*r.Flat/ownS, r.Name)
	}
	fmt.Printf("   top %d below %s, by cum (µs/req, share of the own part; nested, so they overlap):\n", ownTopN, fnGateServe)
	for _, r := range own.topCumBelow(fnGateServe, ownTopN) {
		fmt.Printf("     %7.2f  %5.1f%%  %s\n", w.usPerReq(r.Cum), 100*r.Cum/ownS, r.Name)
	}
}

// costRows are the lines of printCostTable: the process's CPU per request
// split into the gate's own part, reverse_proxy's, the background GC's and
// the rest (Caddy's server, net/http, the runtime's other work).
func costRows(p profScenario) (cpu, own, rp, gc, rest float64) {
	w := p.Window
	cpu = w.usPerReq(w.Samples)
	if p.Own != nil {
		own = w.usPerReq(p.Own.cum(fnGateServe))
	}
	rp, gc = w.usPerReq(p.All.cum(fnReverseProxy)), w.usPerReq(p.All.cum(fnGCBgMark))
	return cpu, own, rp, gc, cpu - own - rp - gc
}

// printCostTable prints, side by side for the profiled scenarios, the
// process's CPU per request and its parts.
func printCostTable(list []profScenario) {
	if len(list) == 0 {
		return
	}
	fmt.Printf("\n== per request, from each profile scaled to the process's CPU (/proc) of its window: samples × (process CPU ÷ profile samples) ÷ requests, µs/req\n")
	fmt.Printf("   %-36s", "")
	for _, p := range list {
		fmt.Printf(" %9s", p.Name)
	}
	fmt.Println()
	line := func(label string, f func(profScenario) string) {
		fmt.Printf("   %-36s", label)
		for _, p := range list {
			fmt.Printf(" %9s", f(p))
		}
		fmt.Println()
	}
	num := func(i int) func(profScenario) string {
		return func(p profScenario) string {
			cpu, own, rp, gc, rest := costRows(p)
			v := []float64{cpu, own, rp, gc, rest}[i]
			if i == 1 && p.Own == nil {
				return "—"
			}
			return fmt.Sprintf("%.1f", v)
		}
	}
	line("requests in the window", func(p profScenario) string { return fmt.Sprintf("%.0f", p.Window.Requests) })
	line("process CPU (/proc)", num(0))
	line("  gate's own (Serve − next)", num(1))
	line("  reverse_proxy (cum of ServeHTTP)", num(2))
	line("  GC, background (gcBgMarkWorker)", num(3))
	line("  rest (server, net/http, runtime)", num(4))
}
