package main

import (
	"fmt"
	"time"
)

// The paced pair (-paced share, off by default): B and D again, each sent
// at one rate, share of the rate D reached just before in the same round.
// D-paced's CPU per request above B-paced's is the sidecar's cost of a
// fresh token at one request rate. Unpaced, B runs faster than D: the
// processes sharing the machine's two cores (client, agent, sidecar) then
// sleep and wake at other rates in the two runs, and each of D's requests
// also pays for more idle wake-ups (the agent, whose work does not change,
// spends more CPU a request in D than in B: printed beside D above B). At
// one rate they sleep and wake alike; the agent's CPU a request, the same
// in both runs, is the check, and each paced run's reached rate is printed
// against its target (a loaded machine may not reach it: the pair is then
// not comparable). Information only: the target is judged on unpaced B
// and D. bench/README.md, "D against B at one rate".
const (
	scenBPaced = "B-paced"
	scenDPaced = "D-paced"
)

// pacedPair returns B-paced and D-paced from B and D (their requests,
// checks and metrics; D-paced continues D's walk of the token pool: next
// is set by the caller, so that every request still misses the cache).
func pacedPair(b, d scenario, share float64) []scenario {
	desc := fmt.Sprintf(" paced at %.2g x D's rate", share)
	b.name, b.desc, b.paceOf, b.paceShare = scenBPaced, "B"+desc, "D", share
	d.name, d.desc, d.paceOf, d.paceShare = scenDPaced, "D"+desc, "D", share
	return []scenario{b, d}
}

// wantPaced reports whether a paced scenario runs: with -paced, when -only
// selects it, or both B and D (all of them without -only).
func (e *env) wantPaced(s scenario) bool {
	only := e.cfg.only
	return e.cfg.paced > 0 && (only == nil || only[s.name] || (only["B"] && only["D"]))
}

// paceRound sets s.rate, for a paced scenario, to its share of the rate of
// s.paceOf in this round of this phase (runs so far); ok is false when
// there is none (s.paceOf did not run before it): the paced run is then
// skipped.
func paceRound(s scenario, runs []runResult, phase string, round int) (scenario, bool) {
	if s.paceOf == "" {
		return s, true
	}
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if r.Scenario == s.paceOf && r.Phase == phase && r.Round == round && r.RPS > 0 {
			s.rate = s.paceShare * r.RPS
			return s, true
		}
	}
	return s, false
}

// pacer spaces one worker's sends interval apart on a fixed schedule, the
// workers' starts staggered across one interval so that the sends of all
// spread evenly. A worker whose answer came after its next send time sends
// at once; one more than an interval late takes up its schedule from then
// (no burst to catch up).
type pacer struct {
	interval time.Duration
	next     time.Time
}

func (lr *loadRun) pacer(w, conc int) *pacer {
	p := &pacer{interval: lr.interval}
	if p.interval > 0 && conc > 0 {
		p.next = time.Now().Add(time.Duration(int64(p.interval) * int64(w) / int64(conc)))
	}
	return p
}

// wait sleeps until the next send time (not paced: returns at once).
func (p *pacer) wait() {
	if p.interval <= 0 {
		return
	}
	now := time.Now()
	if d := p.next.Sub(now); d > 0 {
		time.Sleep(d)
	} else if -d > p.interval {
		p.next = now
	}
	p.next = p.next.Add(p.interval)
}
