package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// References bound to the workspace that first used or created them
// (docs/workspaces.md, "Workspaces sharing an agent"): workspace B's
// valid grant never carries workspace A's job, case, step, draft session,
// request or data item to the shared agent.

const (
	wsA = "workspace_123" // baseClaims' workspace
	wsB = "workspace_B"
)

// refScopes are every scope the references tests' calls need.
var refScopes = []any{"supervaizer/action.invoke", "supervaizer/surface.load", "job.start", "job.stop", "job.sync",
	"step.awaiting.submit", "job.start.form", "resource.contacts.get", "resource.contacts.create",
	"resource.contacts.update", "resource.contacts.delete", "resource.contacts.list"}

// refTokens mints a token for workspace A and one for workspace B with refScopes.
func refTokens(t *testing.T, key *signer) (tokA, tokB string) {
	tokA = key.mintWith(t, func(c jwt.MapClaims) { c["scopes"] = refScopes })
	tokB = key.mintWith(t, func(c jwt.MapClaims) {
		c["workspace_id"], c["workspace_slug"], c["scopes"] = wsB, "b", refScopes
	})
	return tokA, tokB
}

// refSidecar is the references tests' fixture: the reference agent, one
// signing key served as a JWKS, a sidecar whose directives directives
// writes for that JWKS's URL, and workspace A's and B's tokens.
func refSidecar(t *testing.T, directives func(jwks string) string) (ag *agent, key *signer, sc *sidecar, tokA, tokB string) {
	ag = refAgent(t)
	key = newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc = startSidecar(t, ag.addr(), directives(jw.url()))
	tokA, tokB = refTokens(t, key)
	return ag, key, sc, tokA, tokB
}

// refAction is an action.invoke for workspace ws with only the references
// in refs (the fixture's own job_id and draft_session_id removed), a fresh
// request id and the JSON-RPC id id.
func refAction(t *testing.T, ws, action, id string, refs map[string]any) []byte {
	return refEnvelope(t, "supervaizer/action.invoke", "action_request", ws, action, id, refs)
}

// refSurface is a surface.load of job.start with refs.
func refSurface(t *testing.T, ws, id string, refs map[string]any) []byte {
	return refEnvelope(t, "supervaizer/surface.load", "surface_request", ws, "", id, refs)
}

func refEnvelope(t *testing.T, method, wrapper, ws, action, id string, refs map[string]any) []byte {
	t.Helper()
	req := fixtureRequest(t)
	for _, k := range []string{"job_id", "draft_session_id", "case_id", "step_id"} {
		delete(req, k)
	}
	req["workspace"] = map[string]any{"id": ws}
	req["request_id"] = "req-" + randomID()
	if action == "" {
		delete(req, "action")
		delete(req, "idempotency_key")
	} else {
		req["action"] = action
		req["idempotency_key"] = "idem-" + randomID()
	}
	for k, v := range refs {
		req[k] = v
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": map[string]any{wrapper: req}})
	return b
}

// refAgent starts an agent whose job.sync with input {"snapshot": s}
// answers a job_state naming job s-job, case s-case, step s-step, an
// effect naming job s-ejob, and the effects case.created (case s-ncase of
// job s-njob) and step.updated (step s-nstep), their ids nested as the
// SDK's effects carry them, and whose DataResource create answers the item
// with the id of its body.
func refAgent(t *testing.T) *agent {
	ag := startAgent(t)
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/a2a" {
			if r.Method == http.MethodPost {
				w.Write(body) // the created item, its id included
				return
			}
			fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
			return
		}
		var env struct {
			ID     json.RawMessage `json:"id"`
			Params struct {
				Req struct {
					Input struct {
						Snapshot string `json:"snapshot"`
					} `json:"input"`
				} `json:"action_request"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &env)
		if s := env.Params.Req.Input.Snapshot; s != "" {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"status":"ok","effects":[{"type":"job.synced","job_id":%q},`+
				`{"type":"case.created","case":{"id":%q,"job_id":%q,"status":"running"}},{"type":"step.updated","step":{"id":%q,"status":"awaiting"}}],`+
				`"job_state":{"job":{"id":%q,"agent_slug":%q,"status":"running"},"cases":[{"id":%q,"steps":[{"id":%q,"activity":"operation","status":"running"}]}]}}}`,
				env.ID, s+"-ejob", s+"-ncase", s+"-njob", s+"-nstep", s+"-job", testAgent, s+"-case", s+"-step")
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"status":"ok","effects":[]}}`, env.ID)
	}
	return ag
}

// wantRefused asserts a references refusal on /a2a: HTTP 200, -32030
// workspace_authorization_wrong_workspace, the request id echoed, a message
// naming field and never workspace A, and the agent received nothing.
func wantRefused(t *testing.T, ag *agent, field, id string, call func() response) rpcAnswer {
	t.Helper()
	before := ag.count.Load()
	r := call()
	a := wantRPCError(t, r, -32030, "workspace_authorization_wrong_workspace")
	if string(a.ID) != fmt.Sprintf("%q", id) {
		t.Fatalf("id %s, want %q", a.ID, id)
	}
	if !strings.Contains(a.Error.Message, field) || strings.Contains(string(r.Body), wsA) {
		t.Fatalf("message must name %s and not the owner: %s", field, r.Body)
	}
	if n := ag.count.Load(); n != before {
		t.Fatalf("the agent received %d request(s) of a refused call", n-before)
	}
	return a
}

// wantPassed asserts an /a2a call reached the agent and was answered.
func wantPassed(t *testing.T, ag *agent, what string, call func() response) rpcAnswer {
	t.Helper()
	before := ag.count.Load()
	a := decodeRPC(t, call())
	if a.Error != nil {
		t.Fatalf("%s refused: %+v", what, a.Error)
	}
	if ag.count.Load() == before {
		t.Fatalf("%s never reached the agent", what)
	}
	return a
}

// TestReferencesBoundToWorkspace: workspace B's job.stop,
// step.awaiting.submit and surface.load with workspace A's job_id,
// case_id, step_id (sent by A, or learned from the job_state or the
// effects of A's answer, flat or nested) and draft_session_id, and B's get, update and delete of A's
// DataResource item, are refused and the agent receives nothing, while A's
// own calls pass — over h1, h2 (TLS and h2c) and h3.
func TestReferencesBoundToWorkspace(t *testing.T) {
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startEveryProtocol(t, ag.addr(), jwksDirective(jw.url(), "\t\treferences\n"))
	tokA, tokB := refTokens(t, key)
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		n := randomID()
		job, cas, step, draft := "job-"+n, "case-"+n, "step-"+n, "draft-"+n
		rpcA := func(body []byte) func() response { return func() response { return v.rpc(t, body, tokA) } }
		rpcB := func(body []byte) func() response { return func() response { return v.rpc(t, body, tokB) } }

		// Sent by A: bound to A.
		wantPassed(t, ag, "A's step.awaiting.submit", rpcA(refAction(t, wsA, "step.awaiting.submit", "a1",
			map[string]any{"job_id": job, "case_id": cas, "step_id": step})))
		wantPassed(t, ag, "A's surface.load", rpcA(refSurface(t, wsA, "a2", map[string]any{"draft_session_id": draft})))
		// Learned from the job_state and the effects of A's answer.
		wantPassed(t, ag, "A's job.sync", rpcA(refAction(t, wsA, "job.sync", "a3", map[string]any{"input": map[string]any{"snapshot": n}})))

		for _, c := range []struct {
			field, action string
			refs          map[string]any
		}{
			{"job_id", "job.stop", map[string]any{"job_id": job}},
			{"case_id", "step.awaiting.submit", map[string]any{"case_id": cas}},
			{"step_id", "step.awaiting.submit", map[string]any{"step_id": step}},
			{"job_id", "job.stop", map[string]any{"job_id": n + "-job"}},
			{"job_id", "job.stop", map[string]any{"job_id": n + "-ejob"}},
			{"case_id", "step.awaiting.submit", map[string]any{"job_id": "own-" + n, "case_id": n + "-case"}},
			{"step_id", "step.awaiting.submit", map[string]any{"step_id": n + "-step"}},
			// Nested in the effects: case.created's case.id and case.job_id, step.updated's step.id.
			{"case_id", "job.stop", map[string]any{"case_id": n + "-ncase"}},
			{"job_id", "job.stop", map[string]any{"job_id": n + "-njob"}},
			{"step_id", "step.awaiting.submit", map[string]any{"step_id": n + "-nstep"}},
		} {
			wantRefused(t, ag, c.field, "b-"+c.field, rpcB(refAction(t, wsB, c.action, "b-"+c.field, c.refs)))
		}
		wantRefused(t, ag, "draft_session_id", "b-draft", rpcB(refSurface(t, wsB, "b-draft", map[string]any{"draft_session_id": draft})))
		// B's refused call bound nothing: "own-<n>" is still free for B.
		wantPassed(t, ag, "B's own job.stop", rpcB(refAction(t, wsB, "job.stop", "b-own", map[string]any{"job_id": "own-" + n})))
		// A's own calls pass.
		wantPassed(t, ag, "A's job.stop", rpcA(refAction(t, wsA, "job.stop", "a4", map[string]any{"job_id": job})))
		wantPassed(t, ag, "A's job.stop of a learned job", rpcA(refAction(t, wsA, "job.stop", "a5", map[string]any{"job_id": n + "-job"})))
		wantPassed(t, ag, "A's step of a learned step", rpcA(refAction(t, wsA, "step.awaiting.submit", "a6",
			map[string]any{"case_id": n + "-case", "step_id": n + "-step"})))
		wantPassed(t, ag, "A's step of a case and step learned nested", rpcA(refAction(t, wsA, "step.awaiting.submit", "a7",
			map[string]any{"case_id": n + "-ncase", "step_id": n + "-nstep"})))

		// A DataResource item: created by A (its id learned from the
		// answer), refused to B on get, update and delete.
		item := "item-" + n
		data := "/api/agents/" + testAgent + "/data/contacts/"
		hdr := func(tok, ws string) []string {
			return []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", "Bearer " + tok,
				"X-Supervaize-Workspace-Id", ws, "Content-Type", "application/json"}
		}
		r := v.do(t, http.MethodPost, data, []byte(`{"id":"`+item+`","email":"a@example.com"}`), hdr(tokA, wsA)...)
		if r.Status != 200 || !strings.Contains(string(r.Body), item) {
			t.Fatalf("A's create: %d %s", r.Status, r.Body)
		}
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			before := ag.count.Load()
			var body []byte
			if m == http.MethodPut {
				body = []byte(`{}`)
			}
			r := v.do(t, m, data+item, body, hdr(tokB, wsB)...)
			wantDetail(t, r, http.StatusForbidden, "Workspace authorization: item_id does not belong to this workspace")
			if ag.count.Load() != before {
				t.Fatalf("B's %s of A's item reached the agent", m)
			}
		}
		if r := v.do(t, http.MethodGet, data+item, nil, hdr(tokA, wsA)...); r.Status != 200 {
			t.Fatalf("A's get of its item: %d %s", r.Status, r.Body)
		}
	})
}

// TestReferencesUnknownDeny: under unknown deny a reference bound to nobody
// is refused with exactly the answer of a foreign one (no existence
// oracle), except what the call creates: job.start's job_id, a
// surface.load's draft_session_id.
func TestReferencesUnknownDeny(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return jwksDirective(jwks, "\t\treferences {\n\t\t\tunknown deny\n\t\t}\n")
	})
	rpc := func(tok string, body []byte) func() response { return func() response { return sc.rpc(t, body, tok) } }

	wantPassed(t, ag, "A's job.start creating its job", rpc(tokA, refAction(t, wsA, "job.start", "a1", map[string]any{"job_id": "job-new"})))
	wantPassed(t, ag, "A's surface.load creating its draft", rpc(tokA, refSurface(t, wsA, "a2", map[string]any{"draft_session_id": "draft-new"})))
	wantPassed(t, ag, "A's job.stop of its job", rpc(tokA, refAction(t, wsA, "job.stop", "a3", map[string]any{"job_id": "job-new"})))

	foreign := wantRefused(t, ag, "job_id", "b", rpc(tokB, refAction(t, wsB, "job.stop", "b", map[string]any{"job_id": "job-new"})))
	missing := wantRefused(t, ag, "job_id", "b", rpc(tokB, refAction(t, wsB, "job.stop", "b", map[string]any{"job_id": "job-nobody"})))
	if foreign.Error.Message != missing.Error.Message || string(foreign.Error.Data) != string(missing.Error.Data) {
		t.Fatalf("a foreign and a missing reference answer differently: %+v / %+v", foreign.Error, missing.Error)
	}
	wantRefused(t, ag, "job_id", "b2", rpc(tokB, refAction(t, wsB, "job.start", "b2", map[string]any{"job_id": "job-new"})))
	wantRefused(t, ag, "draft_session_id", "b3", rpc(tokB, refSurface(t, wsB, "b3", map[string]any{"draft_session_id": "draft-new"})))
}

// TestReferencesRequestID: workspace B reusing workspace A's request_id is
// refused (the agent receives nothing) and A's filtered stream still gets
// the effect of A's call.
func TestReferencesRequestID(t *testing.T) {
	forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) {
		ag := startAgent(t)
		sseAgent(ag)
		key := newSigner(t, "k1")
		jw := startJWKS(t, key.jwk())
		sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)+"\t\treferences\n"))
		tokA, tokB := refTokens(t, key)
		reqID := "req-A-" + randomID()
		bodyA := refAction(t, wsA, "job.sync", "x", map[string]any{"request_id": reqID})
		bodyB := refAction(t, wsB, "job.sync", "x", map[string]any{"request_id": reqID})
		wantPassed(t, ag, "A's call", func() response { return sc.rpc(t, bodyA, tokA) })
		wantRefused(t, ag, "request_id", "x", func() response { return sc.rpc(t, bodyB, tokB) })

		_, evs := sseAgentEvents(ag)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
		defer resp.Body.Close()
		if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
			t.Fatalf("first event %q", e)
		}
		evs <- effect(reqID)
		if e := readEvent(t, rd); !strings.Contains(e, reqID) {
			t.Fatalf("A's stream: %q, want the effect of %s", e, reqID)
		}
	})
}

// TestReferencesLearnedFromEvents: the job, case and step ids of the
// effects of a supervaizer.effect event the filter attributes to A (by
// the request_id of A's call), flat (job_id, case_id, step_id) or nested
// as the SDK's effects carry them (case.created's case.id and
// case.job_id, step.updated's step.id), are bound to A: B's calls with them are
// refused and the agent receives nothing; with learn_from_events off they
// are not learned.
func TestReferencesLearnedFromEvents(t *testing.T) {
	forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) {
		for _, learn := range []bool{true, false} {
			t.Run(fmt.Sprint("learn_from_events ", learn), func(t *testing.T) {
				ag := startAgent(t)
				sseAgent(ag)
				key := newSigner(t, "k1")
				jw := startJWKS(t, key.jwk())
				block := "\t\treferences\n"
				if !learn {
					block = "\t\treferences {\n\t\t\tlearn_from_events off\n\t\t}\n"
				}
				sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)+block))
				tokA, tokB := refTokens(t, key)
				reqID := "req-" + randomID()
				wantPassed(t, ag, "A's call", func() response {
					return sc.rpc(t, refAction(t, wsA, "job.sync", "a", map[string]any{"request_id": reqID}), tokA)
				})
				_, evs := sseAgentEvents(ag)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
				defer resp.Body.Close()
				readEvent(t, rd) // connected
				n := randomID()
				evs <- fmt.Sprintf("event: supervaizer.effect\ndata: {\"agent_slug\": %q, \"action\": \"job.sync\", \"request_id\": %q, "+
					"\"effects\": [{\"type\": \"step.updated\", \"job_id\": \"ev-job-%s\", \"case_id\": \"ev-case-%s\", \"step_id\": \"ev-step-%s\"}, "+
					"{\"type\": \"case.created\", \"case\": {\"id\": \"ev-ncase-%s\", \"job_id\": \"ev-njob-%s\"}}, "+
					"{\"type\": \"step.updated\", \"step\": {\"id\": \"ev-nstep-%s\", \"status\": \"completed\"}}]}\n\n",
					testAgent, reqID, n, n, n, n, n, n)
				if e := readEvent(t, rd); !strings.Contains(e, reqID) {
					t.Fatalf("A's stream: %q", e)
				}
				calls := []map[string]any{{"job_id": "ev-job-" + n}, {"case_id": "ev-case-" + n}, {"step_id": "ev-step-" + n},
					{"case_id": "ev-ncase-" + n}, {"job_id": "ev-njob-" + n}, {"step_id": "ev-nstep-" + n}}
				for _, refs := range calls {
					body := refAction(t, wsB, "step.awaiting.submit", "b", refs)
					call := func() response { return sc.rpc(t, body, tokB) }
					for field := range refs {
						if learn {
							wantRefused(t, ag, field, "b", call)
						} else {
							wantPassed(t, ag, "B's call, nothing learned", call)
						}
					}
				}
			})
		}
	})
}

// TestReferencesWhoBinds: local mode binds on the request's workspace; a
// bootstrap call binds nothing; a replay binds nothing new (its case_id,
// outside the idempotency fingerprint, stays free).
func TestReferencesWhoBinds(t *testing.T) {
	t.Run("local mode", func(t *testing.T) {
		ag := refAgent(t)
		sc := startSidecar(t, ag.addr(), localDirective("\t\treferences\n"))
		wantPassed(t, ag, "A's call", func() response {
			return sc.rpc(t, refAction(t, wsA, "job.stop", "a", map[string]any{"job_id": "job-l"}), "")
		})
		wantRefused(t, ag, "job_id", "b", func() response {
			return sc.rpc(t, refAction(t, wsB, "job.stop", "b", map[string]any{"job_id": "job-l"}), "")
		})
	})
	t.Run("bootstrap and replay", func(t *testing.T) {
		ag := refAgent(t)
		key := newSigner(t, "k1")
		jw := startJWKS(t, key.jwk())
		sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), "\t\treferences\n"))
		tokA, tokB := refTokens(t, key)
		wantPassed(t, ag, "a bootstrap call", func() response {
			return sc.rpc(t, refAction(t, wsA, "workspace_binding.options", "a", map[string]any{"job_id": "job-boot"}), "")
		})
		wantPassed(t, ag, "B's call with the job a bootstrap call named", func() response {
			return sc.rpc(t, refAction(t, wsB, "job.stop", "b", map[string]any{"job_id": "job-boot"}), tokB)
		})

		first := refAction(t, wsA, "job.start", "a", map[string]any{"job_id": "job-rp", "idempotency_key": "k-rp"})
		wantPassed(t, ag, "A's job.start", func() response { return sc.rpc(t, first, tokA) })
		replay := refAction(t, wsA, "job.start", "a", map[string]any{"job_id": "job-rp", "idempotency_key": "k-rp", "case_id": "case-rp"})
		before := ag.count.Load()
		if r := sc.rpc(t, replay, tokA); r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" || !strings.Contains(string(r.Body), `"result"`) {
			t.Fatalf("replay: %s", r.Body)
		}
		if ag.count.Load() != before {
			t.Fatal("the replay reached the agent")
		}
		wantPassed(t, ag, "B's call with the case only a replay named", func() response {
			return sc.rpc(t, refAction(t, wsB, "step.awaiting.submit", "b", map[string]any{"case_id": "case-rp"}), tokB)
		})
		wantRefused(t, ag, "job_id", "b", func() response {
			return sc.rpc(t, refAction(t, wsB, "job.stop", "b", map[string]any{"job_id": "job-rp"}), tokB)
		})
	})
}

// TestReferencesSquattedIDConflicted: an id workspace B used first (a
// guess) that the agent then names in its answer to A is refused to both:
// B can never act on what the agent made A's.
func TestReferencesSquattedIDConflicted(t *testing.T) {
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startMetricsSidecar(t, ag.addr(), jwksDirective(jw.url(), "\t\treferences\n"))
	tokA, tokB := refTokens(t, key)
	n := randomID()
	wantPassed(t, ag, "B's call with a guessed job id", func() response {
		return sc.rpc(t, refAction(t, wsB, "job.stop", "b", map[string]any{"job_id": n + "-job"}), tokB)
	})
	wantPassed(t, ag, "A's job.sync naming that job", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.sync", "a", map[string]any{"input": map[string]any{"snapshot": n}}), tokA)
	})
	wantRefused(t, ag, "job_id", "b", func() response {
		return sc.rpc(t, refAction(t, wsB, "job.stop", "b", map[string]any{"job_id": n + "-job"}), tokB)
	})
	before := ag.count.Load()
	r := sc.rpc(t, refAction(t, wsA, "job.stop", "a", map[string]any{"job_id": n + "-job"}), tokA)
	wantRPCError(t, r, -32030, "workspace_authorization_wrong_workspace")
	if ag.count.Load() != before {
		t.Fatal("a conflicted job reached the agent")
	}
	if got := sc.metric(t, `supervaizer_sidecar_references_total{field="job_id",outcome="learn_conflict"}`); got != "1" {
		t.Fatalf("learn_conflict = %q", got)
	}
}
