package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The fairness scenario (project issue 23): site L is supervaizer_auth with
//
//	limits { rate job.sync <fairRate>/s }
//
// Workspace B sends job.sync at its normal rate (fairBRate/s, under its
// limit) for fairDuration, first alone, then while workspace A floods at
// 20 times its limit. The bound: B's success rate with A flooding is the
// same as alone (every call answered by the agent, none refused), and B's
// p99 stays within fairP99Factor of B alone plus fairP99Slack (2 shared
// cores: the flood's refusals still cost CPU). A's refusals must be the
// documented -32029 answer and A's forwarded calls at most its budget.
const (
	siteL         = "L" // supervaizer_auth with a limits rule (fairness)
	fairRate      = 50  // the rule: job.sync 50/s per workspace (burst 50)
	fairBRate     = 25  // B's normal rate, calls/s
	fairFlood     = 20  // A floods at fairFlood × fairRate calls/s
	fairDuration  = 5 * time.Second
	fairP99Factor = 3.0
	fairP99Slack  = 20 * time.Millisecond
	fairInFlight  = 512 // bound of the generator's calls in flight (a full generator drops, and says so)
)

// paced is the outcome of one open-loop, constant-rate stream of calls.
type paced struct {
	sent, ok, limited, other, dropped int64
	lat                               []time.Duration // of the calls answered by the agent
}

func (p *paced) successRate() float64 {
	if p.sent == 0 {
		return 0
	}
	return float64(p.ok) / float64(p.sent)
}

func (p *paced) p99() time.Duration {
	if len(p.lat) == 0 {
		return 0
	}
	s := slices.Clone(p.lat)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// pace sends body with token to site at rate calls/s for d (open loop: a
// slow answer does not slow the sender), at most fairInFlight at once.
func (e *env) pace(ctx context.Context, cl *http.Client, site string, body []byte, token string, rate int, d time.Duration) *paced {
	out := &paced{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var inflight atomic.Int64
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.After(d)
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return out
		case <-end:
			wg.Wait()
			return out
		case <-tick.C:
		}
		mu.Lock()
		out.sent++
		mu.Unlock()
		if inflight.Add(1) > fairInFlight {
			inflight.Add(-1)
			mu.Lock()
			out.dropped++
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inflight.Add(-1)
			start := time.Now()
			kind := e.fairCall(cl, site, body, token)
			lat := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			switch kind {
			case "ok":
				out.ok++
				out.lat = append(out.lat, lat)
			case "limited":
				out.limited++
			default:
				out.other++
			}
		}()
	}
}

// fairCall sends one call and classifies the answer: ok (the agent's
// result), limited (the documented -32029 answer with Retry-After) or other.
func (e *env) fairCall(cl *http.Client, site string, body []byte, token string) string {
	req, err := http.NewRequest(http.MethodPost, e.url(site, "/a2a"), bytes.NewReader(body))
	if err != nil {
		return "other"
	}
	req.Header.Set("X-API-Key", benchWriteKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+token)
	resp, err := cl.Do(req)
	if err != nil {
		return "other"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch {
	case forwardedOK(resp, b):
		return "ok"
	case resp.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`"code":-32029`)) &&
		bytes.Contains(b, []byte(`"rate_limited"`)) && resp.Header.Get("Retry-After") != "":
		return "limited"
	}
	return "other"
}

// fairnessBodies are job.sync calls of workspace ws and a token for it.
func (e *env) fairnessCall(ws string) ([]byte, string, error) {
	var env map[string]any
	if err := json.Unmarshal(e.bodySync, &env); err != nil {
		return nil, "", err
	}
	req := env["params"].(map[string]any)["action_request"].(map[string]any)
	req["workspace"] = map[string]any{"id": ws, "slug": "acme"}
	body, err := json.Marshal(env)
	if err != nil {
		return nil, "", err
	}
	now := time.Now().Unix()
	claims := jwt.MapClaims{
		"iss": benchIssuer, "aud": "supervaizer-server:" + benchServerID, "sub": "workspace-agent-grant:grant-" + ws,
		"grant_id": "grant-" + ws, "workspace_id": ws, "workspace_slug": "acme",
		"agent_id": benchAgentID, "agent_slug": benchAgent, "server_id": benchServerID,
		"scopes":              []any{"supervaizer/action.invoke", "job.sync"},
		"agent_workspace_ref": "agent-ws-1", "iat": now, "exp": now + 3600, "jti": "jti-fair-" + ws,
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(e.studioPriv)
	return body, tok, err
}

// runFairness runs B alone, then B with A flooding, and prints the bound.
func runFairness(ctx context.Context, cfg *config) error {
	cfg.tokens, cfg.redis, cfg.fairness = 1, "off", true
	e, err := setup(ctx, cfg, false)
	defer e.teardown()
	if err != nil {
		return err
	}
	bodyA, tokA, err := e.fairnessCall("ws-flood-a")
	if err != nil {
		return err
	}
	bodyB, tokB, err := e.fairnessCall("ws-normal-b")
	if err != nil {
		return err
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: fairInFlight}}
	fmt.Printf("== fairness: rule job.sync %d/s per workspace; B at %d/s for %s, alone then with A at %d/s\n",
		fairRate, fairBRate, fairDuration, fairFlood*fairRate)
	alone := e.pace(ctx, cl, siteL, bodyB, tokB, fairBRate, fairDuration)
	var flood *paced
	done := make(chan struct{})
	go func() {
		flood = e.pace(ctx, cl, siteL, bodyA, tokA, fairFlood*fairRate, fairDuration)
		close(done)
	}()
	shared := e.pace(ctx, cl, siteL, bodyB, tokB, fairBRate, fairDuration)
	<-done
	fmt.Printf("%-22s %8s %8s %8s %8s %8s %10s\n", "", "sent", "ok", "limited", "other", "dropped", "p99")
	for _, row := range []struct {
		name string
		p    *paced
	}{{"B alone", alone}, {"B with A flooding", shared}, {"A flooding", flood}} {
		fmt.Printf("%-22s %8d %8d %8d %8d %8d %10s\n", row.name, row.p.sent, row.p.ok, row.p.limited, row.p.other, row.p.dropped,
			row.p.p99().Round(10*time.Microsecond))
	}
	bound := time.Duration(float64(alone.p99())*fairP99Factor) + fairP99Slack
	budgetA := int64(fairRate*fairDuration/time.Second) + fairRate + fairRate/5 // rate × d + burst, 20% slack for timing
	checks := []struct {
		name string
		pass bool
	}{
		{fmt.Sprintf("B's success rate with A flooding (%.4f) = alone (%.4f)", shared.successRate(), alone.successRate()),
			shared.successRate() >= alone.successRate() && shared.limited == 0},
		{fmt.Sprintf("B's p99 with A flooding (%s) <= %.0f x alone + %s (%s)", shared.p99().Round(10*time.Microsecond),
			fairP99Factor, fairP99Slack, bound.Round(10*time.Microsecond)), shared.p99() <= bound},
		{fmt.Sprintf("A's calls forwarded (%d) <= its budget (%d), the rest refused -32029 (other %d)", flood.ok, budgetA, flood.other),
			flood.ok <= budgetA && flood.other == 0 && flood.limited > 0},
	}
	failed := false
	for _, c := range checks {
		verdict := "PASS"
		if !c.pass {
			verdict, failed = "FAIL", true
		}
		fmt.Printf("%s  %s\n", verdict, c.name)
	}
	if failed {
		return fmt.Errorf("fairness bound not held")
	}
	return nil
}
