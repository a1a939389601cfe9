package test

import (
	"net/http"
	"strings"
	"testing"
)

// TestSettingsPlaceholders: a Caddyfile that writes the key, the server id
// and the issuer as {env.*} placeholders (as the README's examples do)
// serves with the variables' values: the real key and a token for the
// expanded server and issuer reach the agent, while the placeholder's text
// sent as the key (newcomer finding F1) is 401 and the agent receives
// nothing. A request placeholder in a setting is refused at start-up,
// naming the setting.
func TestSettingsPlaceholders(t *testing.T) {
	t.Setenv("SVT_PH_KEY", testKey)
	t.Setenv("SVT_PH_SID", testServerID)
	t.Setenv("SVT_PH_ISS", testIssuer)
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	directive := strings.NewReplacer("api_key "+testKey+" ", "api_key {env.SVT_PH_KEY} ",
		"server_id "+testServerID+"\n", "server_id {env.SVT_PH_SID}\n",
		"issuer "+testIssuer+"\n", "issuer {env.SVT_PH_ISS}\n").Replace(jwksDirective(jw.url(), ""))
	if strings.Count(directive, "{env.SVT_PH_") != 3 {
		t.Fatalf("directive not rewritten:\n%s", directive)
	}
	sc := startSidecar(t, ag.addr(), directive)
	tok := key.mint(t, baseClaims())
	resultOf(t, sc.rpc(t, freshJobStart(t), tok))
	if n := ag.count.Load(); n != 1 {
		t.Fatalf("agent received %d requests, want 1", n)
	}

	ag.reset()
	r := do(t, http.MethodPost, sc.base+"/a2a", freshJobStart(t), "X-API-Key", "{env.SVT_PH_KEY}",
		"Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	wantDetail(t, r, http.StatusUnauthorized, "Invalid or missing API key")
	nothingReached(t, ag)

	_, err := tryStartSidecar(t, ag.addr(), strings.Replace(directive, "{env.SVT_PH_KEY}", "{header.X-Key}", 1))
	if err == nil || !strings.Contains(err.Error(), "api_key 1: {http.request.header.X-Key} is not a placeholder known at start-up") {
		t.Fatalf("a request placeholder in api_key: %v, want refused naming api_key", err)
	}
}
