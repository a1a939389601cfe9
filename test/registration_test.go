package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestRegistrationEnforcement: the fixture's registration, served by the
// agent's real card endpoint, decides which actions and surfaces pass.
func TestRegistrationEnforcement(t *testing.T) {
	ag := startAgent(t)
	ag.serveCard(200, cardFor(t, nil))
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), registrationDirective(jw.url(), ag.addr()))
	waitReady(t, sc)

	tokWith := func(scopes ...any) string {
		return key.mintWith(t, func(c jwt.MapClaims) {
			c["scopes"] = append([]any{"supervaizer/action.invoke", "supervaizer/surface.load"}, scopes...)
		})
	}
	// Declared action passes.
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), tokWith("job.start"))); a.Error != nil {
		t.Fatalf("declared job.start refused: %+v", a.Error)
	}
	ag.reset()
	// Undeclared action: -32010 with the SDK's data, before the agent.
	r := sc.rpc(t, actionFor(t, "job.cancel"), tokWith("job.cancel"))
	a := wantRPCError(t, r, -32010, "")
	if a.Error.Message != "Action handler not registered: job.cancel" ||
		!strings.Contains(string(a.Error.Data), `"agent_slug":"agent_interviewer"`) || !strings.Contains(string(a.Error.Data), `"action":"job.cancel"`) {
		t.Fatalf("undeclared action answer: %s", r.Body)
	}
	// Undeclared surface: -32011.
	r = sc.rpc(t, surfaceEnvelope(t, "mission.agent.secret"), tokWith("mission.agent.secret"))
	a = wantRPCError(t, r, -32011, "")
	if !strings.Contains(string(a.Error.Data), `"surface":"mission.agent.secret"`) {
		t.Fatalf("undeclared surface answer: %s", r.Body)
	}
	// Bootstrap calls skip the token but must be declared: the fixture has
	// no workspace_binding block.
	wantRPCError(t, sc.rpc(t, actionFor(t, "workspace_binding.options"), ""), -32010, "")
	nothingReached(t, ag)
	// Derived actions (a resource operation) pass.
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "resource.contacts.list"), tokWith("resource.contacts.list"))); a.Error != nil {
		t.Fatalf("derived resource action refused: %+v", a.Error)
	}

	// The card gains job.cancel at runtime: picked up by the refresh.
	ag.serveCard(200, cardFor(t, func(reg map[string]any) {
		caps := reg["capabilities"].(map[string]any)
		caps["actions"] = append(caps["actions"].([]any), "job.cancel")
	}))
	eventually(t, 15*time.Second, "job.cancel to be declared", func() bool {
		a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.cancel"), tokWith("job.cancel")))
		return a.Error == nil
	})
	// On demand: another change is read at once through /_sidecar/refresh.
	ag.serveCard(200, cardFor(t, func(reg map[string]any) {
		caps := reg["capabilities"].(map[string]any)
		caps["actions"] = append(caps["actions"].([]any), "job.cancel", "job.pause")
	}))
	if r := do(t, "POST", sc.base+"/_sidecar/refresh", nil, "X-API-Key", testReadKey); r.Status != 403 {
		t.Fatalf("refresh with a read key: %d", r.Status)
	}
	if r := do(t, "POST", sc.base+"/_sidecar/refresh", nil, "X-API-Key", testKey); r.Status != 200 {
		t.Fatalf("refresh: %d %s", r.Status, r.Body)
	}
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.pause"), tokWith("job.pause"))); a.Error != nil {
		t.Fatalf("job.pause not declared right after the refresh: %+v", a.Error)
	}
	// The change is visible to operators.
	st := do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey)
	if st.Status != 200 || !strings.Contains(string(st.Body), `"kind":"expanding"`) || !strings.Contains(string(st.Body), "action added: job.pause") {
		t.Fatalf("status does not show the expanding change: %s", st.Body)
	}
	if do(t, "GET", sc.base+"/_sidecar/status", nil).Status != 401 {
		t.Fatal("status readable without a key")
	}
}

// TestRegistrationAgentDownThenUp: until the card is read, calls fail
// closed and readiness is false; then they pass.
func TestRegistrationAgentDownThenUp(t *testing.T) {
	ag := startAgent(t)
	ag.serveCard(503, []byte(`{"detail":"starting"}`))
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), registrationDirective(jw.url(), ag.addr()))

	wantRPCError(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims())), -32030, "agent_contract_unavailable")
	nothingReached(t, ag)
	if r := do(t, "GET", sc.base+"/_sidecar/ready", nil); r.Status != 503 || !strings.Contains(string(r.Body), "agent_card:agent_interviewer") {
		t.Fatalf("ready while the card is unread: %d %s", r.Status, r.Body)
	}
	ag.serveCard(200, cardFor(t, nil))
	waitReady(t, sc)
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims()))); a.Error != nil {
		t.Fatalf("refused after the card was read: %+v", a.Error)
	}
}

// TestRegistrationVersionMismatch: an a2a_version outside the accepted set
// fails the agent's calls explicitly.
func TestRegistrationVersionMismatch(t *testing.T) {
	ag := startAgent(t)
	ag.serveCard(200, cardFor(t, func(reg map[string]any) { reg["versions"].(map[string]any)["a2a_version"] = "0.3.0" }))
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), registrationDirective(jw.url(), ag.addr()))
	eventually(t, 15*time.Second, "the version error", func() bool {
		a := decodeRPC(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims())))
		return a.Error != nil && strings.Contains(string(a.Error.Data), "contract_version_unsupported")
	})
	a := wantRPCError(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims())), -32030, "contract_version_unsupported")
	if !strings.Contains(a.Error.Message, "0.3.0") || !strings.Contains(a.Error.Message, "0.2.6") {
		t.Fatalf("message does not name the versions: %s", a.Error.Message)
	}
	nothingReached(t, ag)
}

// TestRegistrationWorkspaceBinding: an agent that requires a binding refuses
// a token without agent_workspace_ref, generically.
func TestRegistrationWorkspaceBinding(t *testing.T) {
	ag := startAgent(t)
	ag.serveCard(200, cardFor(t, func(reg map[string]any) {
		reg["workspace_binding"] = map[string]any{"required": true, "modes": []any{"bind_existing"},
			"existing": map[string]any{"action": "workspace_binding.options", "value_field": "agent_workspace_ref", "label_field": "display_name"}}
	}))
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), registrationDirective(jw.url(), ag.addr()))
	waitReady(t, sc)

	a := wantRPCError(t, sc.rpc(t, freshJobStart(t), key.mintWith(t, func(c jwt.MapClaims) { delete(c, "agent_workspace_ref") })), -32030, "workspace_binding_missing")
	if a.Error.Message != "Workspace is authorized in Studio but has no agent-side workspace binding." {
		t.Fatalf("message %q", a.Error.Message)
	}
	nothingReached(t, ag)
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims()))); a.Error != nil {
		t.Fatalf("token with agent_workspace_ref refused: %+v", a.Error)
	}
	// The declared bootstrap action passes without a token.
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "workspace_binding.options"), "")); a.Error != nil {
		t.Fatalf("declared bootstrap refused: %+v", a.Error)
	}
}

// TestRegistrationFromFile: `registration file <path>` (agents without
// cards) enforces the fixture's registration read from a JSON file.
func TestRegistrationFromFile(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	path := t.TempDir() + "/registration.json"
	writeFile(t, path, string(loadFixture(t).Registration))
	dir := fmt.Sprintf(`		api_key %s write
		server_id %s
		agent %s %s
		workspace_auth {
			required on
			issuer %s
			jwks_url %s
		}
		registration file %s
`, testKey, testServerID, testAgent, testAgentID, testIssuer, jw.url(), path)
	sc := startSidecar(t, ag.addr(), dir)
	waitReady(t, sc)
	tok := key.mintWith(t, func(c jwt.MapClaims) {
		c["scopes"] = []any{"supervaizer/action.invoke", "job.start", "job.cancel"}
	})
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), tok)); a.Error != nil {
		t.Fatalf("declared job.start refused: %+v", a.Error)
	}
	ag.reset()
	wantRPCError(t, sc.rpc(t, actionFor(t, "job.cancel"), tok), -32010, "")
	nothingReached(t, ag)
}

// TestContractFirstLoadIsInitial: the first load of an agent's contract is
// counted as kind "initial", not as an expanding change (an alert on
// expanding changes must not fire at every start); a later change that adds
// an action is expanding.
func TestContractFirstLoadIsInitial(t *testing.T) {
	ag := startAgent(t)
	ag.serveCard(200, cardFor(t, nil))
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startMetricsSidecar(t, ag.addr(), registrationDirective(jw.url(), ag.addr()))
	waitReady(t, sc)
	metrics := func() string { return string(do(t, http.MethodGet, sc.base+"/metrics", nil).Body) }
	if m := metrics(); !strings.Contains(m, `supervaizer_sidecar_contract_changes_total{kind="initial"} 1`) || strings.Contains(m, `kind="expanding"`) {
		t.Fatalf("first load not counted as initial:\n%s", grepLines(m, "contract_changes"))
	}
	// /_sidecar/status says the same: initial, no differences.
	var st struct {
		Contracts map[string]struct {
			LastChange struct {
				Kind        string   `json:"kind"`
				Differences []string `json:"differences"`
			} `json:"last_change"`
		} `json:"contracts"`
	}
	if err := json.Unmarshal(do(t, http.MethodGet, sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey).Body, &st); err != nil {
		t.Fatal(err)
	}
	if lc := st.Contracts[testAgent].LastChange; lc.Kind != "initial" || len(lc.Differences) != 0 {
		t.Errorf("/_sidecar/status last_change after the first load = %+v, want initial without differences", lc)
	}
	ag.serveCard(200, cardFor(t, func(reg map[string]any) {
		caps := reg["capabilities"].(map[string]any)
		caps["actions"] = append(caps["actions"].([]any), "job.cancel")
	}))
	eventually(t, 15*time.Second, "the expanding change", func() bool {
		return strings.Contains(metrics(), `supervaizer_sidecar_contract_changes_total{kind="expanding"} 1`)
	})
}
