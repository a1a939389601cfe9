package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// auditLines returns the sidecar's audit lines (logger
// http.handlers.supervaizer_auth, message "supervaizer decision"), decoded.
func auditLines(t *testing.T, sc *sidecar) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(sc.logs(t), "\n") {
		if !strings.Contains(l, `"supervaizer decision"`) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("audit line is not JSON: %s", l)
		}
		out = append(out, m)
	}
	return out
}

// lastAudit is the last audit line (failing if there is none).
func lastAudit(t *testing.T, sc *sidecar) map[string]any {
	t.Helper()
	lines := auditLines(t, sc)
	if len(lines) == 0 {
		t.Fatal("no audit line")
	}
	return lines[len(lines)-1]
}

// TestAuditKeyRefusalReasons: each transport key refusal says why, in the
// audit line and in the decisions metric, and every line has the client's
// address; the agent receives nothing.
func TestAuditKeyRefusalReasons(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startMetricsSidecar(t, ag.addr(), jwksDirective(jw.url(), ""))
	body := actionFor(t, "job.sync")
	for _, c := range []struct {
		name    string
		headers []string
		status  int
		code    string
	}{
		{"missing", nil, 401, "api_key_missing"},
		{"unknown", []string{"X-API-Key", "nope"}, 401, "api_key_unknown"},
		{"duplicate", []string{"X-API-Key", testKey, "X-API-Key", testKey}, 401, "api_key_duplicate"},
		{"read key on a write route", []string{"X-API-Key", testReadKey}, 403, "api_key_insufficient_scope"},
	} {
		r := do(t, http.MethodPost, sc.base+"/a2a", body, append(c.headers, "Content-Type", "application/json")...)
		if r.Status != c.status {
			t.Fatalf("%s: status %d, want %d", c.name, r.Status, c.status)
		}
		l := lastAudit(t, sc)
		if l["outcome"] != "deny" || l["code"] != c.code || !strings.HasPrefix(fmt.Sprint(l["client"]), "127.0.0.1:") {
			t.Fatalf("%s: audit line %v, want deny %s with the client address", c.name, l, c.code)
		}
	}
	nothingReached(t, ag)
	metrics := string(do(t, http.MethodGet, sc.base+"/metrics", nil).Body)
	for _, code := range []string{"api_key_missing", "api_key_unknown", "api_key_duplicate", "api_key_insufficient_scope"} {
		if !strings.Contains(metrics, `supervaizer_sidecar_decisions_total{code="`+code+`",outcome="deny",route="controller"} 1`) {
			t.Fatalf("no decisions metric for %s:\n%s", code, grepLines(metrics, "decisions_total"))
		}
	}
}

// TestAuditRefusedTokenClaims: a token whose signature verified but whose
// issuer or audience is wrong is refused, and its line carries the token's
// iss, aud, grant_id and jti (never the token itself).
func TestAuditRefusedTokenClaims(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	tok := key.mintWith(t, func(c jwt.MapClaims) {
		c["iss"] = testIssuer + "/"
		c["jti"] = "jti-audit-1"
	})
	wantRPCError(t, sc.rpc(t, actionFor(t, "job.sync"), tok), -32030, "workspace_authorization_wrong_issuer")
	l := lastAudit(t, sc)
	if l["iss"] != testIssuer+"/" || l["aud"] != "supervaizer-server:"+testServerID || l["grant_id"] != "grant-1" || l["jti"] != "jti-audit-1" {
		t.Fatalf("audit line lacks the refused token's claims: %v", l)
	}
	if strings.Contains(sc.logs(t), tok) {
		t.Fatal("the token is in the log")
	}
	nothingReached(t, ag)
}

// TestAuditIdempotencyRefusalIsDeny: a retry refused idempotency_in_progress
// is a deny line with that code, not an allow.
func TestAuditIdempotencyRefusalIsDeny(t *testing.T) {
	fa, key, sc := faultGate(t, "")
	fa.mode.Store(answerReset)
	body := jobStartWithKey(t, "k-audit")
	sc.rpc(t, body, key.mint(t, baseClaims()))
	wantInProgress(t, sc.rpc(t, body, key.mint(t, baseClaims())))
	if l := lastAudit(t, sc); l["outcome"] != "deny" || l["code"] != "idempotency_in_progress" {
		t.Fatalf("audit line %v, want deny idempotency_in_progress", l)
	}
}

// TestAuditLogDenyOnly: audit_log deny keeps denials and drops allow lines.
func TestAuditLogDenyOnly(t *testing.T) {
	_, key, _, sc := startTokenGate(t, "		audit_log deny\n")
	decodeRPC(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims())))
	wantRPCError(t, sc.rpc(t, freshJobStart(t), ""), -32030, "workspace_authorization_missing")
	logs := sc.logs(t)
	if strings.Contains(logs, `"outcome":"allow"`) {
		t.Fatal("an allow line was logged with audit_log deny")
	}
	if !strings.Contains(logs, `"code":"workspace_authorization_missing"`) {
		t.Fatal("the denial was not logged")
	}
}
