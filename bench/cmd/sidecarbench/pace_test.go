package main

import (
	"testing"
)

// TestPacedPair: with -paced, B-paced and D-paced follow D in the list,
// D-paced walks D's token pool with D's counter, and each takes its share
// of the rate D reached in the same round and phase (none before D ran:
// skipped); without -paced they are not in the list.
func TestPacedPair(t *testing.T) {
	e := &env{cfg: &config{tokens: 4, paced: 0.5}, dir: t.TempDir()}
	if err := e.makeTokens(); err != nil {
		t.Fatal(err)
	}
	list := e.scenarios()
	names := map[string]int{}
	for i, s := range list {
		names[s.name] = i
	}
	d, bp, dp := names["D"], names[scenBPaced], names[scenDPaced]
	if bp != d+1 || dp != d+2 {
		t.Fatalf("order %v: want D, %s, %s", names, scenBPaced, scenDPaced)
	}
	if list[dp].next != list[d].next || list[bp].next == list[d].next || len(list[dp].tokens) != len(list[d].tokens) {
		t.Fatal("D-paced does not walk D's pool with D's counter")
	}
	if list[bp].site != siteB || len(list[bp].tokens) != 1 {
		t.Fatalf("B-paced is not B: %+v", list[bp])
	}
	runs := []runResult{{Scenario: "D", Phase: "main", Round: 1, RPS: 3000}, {Scenario: "D", Phase: "main", Round: 2, RPS: 4000}}
	if s, ok := paceRound(list[dp], runs, "main", 2); !ok || s.rate != 2000 {
		t.Fatalf("round 2: rate %v, %v; want 2000", s.rate, ok)
	}
	if _, ok := paceRound(list[bp], runs, "main", 3); ok {
		t.Fatal("round 3, before D ran: not skipped")
	}
	if s, ok := paceRound(list[d], runs, "main", 3); !ok || s.rate != 0 {
		t.Fatal("D itself is paced")
	}
	e.cfg.paced = 0
	for _, s := range e.scenarios() {
		if s.paceOf != "" {
			t.Fatalf("%s without -paced", s.name)
		}
	}
}
