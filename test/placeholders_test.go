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

// placeholderHeaders are the response headers the test Caddyfile fills from
// the decision's placeholders (header directive, deferred).
var placeholderHeaders = map[string]string{
	"X-Auth-User":      "http.auth.user.id",
	"X-Sv-Workspace":   "supervaizer.workspace_id",
	"X-Sv-Slug":        "supervaizer.workspace_slug",
	"X-Sv-Grant":       "supervaizer.grant_id",
	"X-Sv-Agent-Slug":  "supervaizer.agent_slug",
	"X-Sv-Agent-Id":    "supervaizer.agent_id",
	"X-Sv-Jti":         "supervaizer.jti",
	"X-Sv-Mode":        "supervaizer.mode",
	"X-Sv-Route":       "supervaizer.route",
	"X-Sv-Target":      "supervaizer.target",
	"X-Sv-Outcome":     "supervaizer.outcome",
	"X-Sv-Code":        "supervaizer.code",
	"X-Sv-Unknown-Key": "supervaizer.no_such_placeholder",
}

// identityHeaders carry the verified identity: empty on every denial.
var identityHeaders = []string{"X-Auth-User", "X-Sv-Workspace", "X-Sv-Slug", "X-Sv-Grant", "X-Sv-Agent-Slug", "X-Sv-Agent-Id", "X-Sv-Jti", "X-Sv-Mode"}

// startPlaceholderGate runs a Caddyfile that uses the decision's
// placeholders three ways: a deferred `header` copies them into the
// response, a CEL matcher on them routes a verified workspace_123 job.sync
// to `respond` (the agent never sees it), and `log_append` puts them in the
// access log.
func startPlaceholderGate(t *testing.T) (*agent, *signer, *sidecar) {
	t.Helper()
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	var hdr strings.Builder
	for name, ph := range placeholderHeaders {
		fmt.Fprintf(&hdr, "\t\t%s \"{%s}\"\n", name, ph)
	}
	sc, err := runCaddyfile(t, "", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n"+
			"\tlog\n"+
			"\tlog_append sv_workspace {supervaizer.workspace_id}\n"+
			"\tlog_append sv_outcome {supervaizer.outcome}\n"+
			"\tlog_append sv_code {supervaizer.code}\n"+
			"\tlog_append auth_user {http.auth.user.id}\n"+
			"\theader {\n\t\tdefer\n%s\t}\n"+
			"\troute {\n"+
			"\t\tsupervaizer_auth {\n%s\t\t}\n"+
			"\t\t@ws expression `{supervaizer.workspace_id} == \"workspace_123\" && {supervaizer.target} == \"job.sync\"`\n"+
			"\t\trespond @ws \"answered by Caddy for {supervaizer.workspace_slug}\" 200\n"+
			"\t\treverse_proxy %s\n"+
			"\t}\n}\n", port, hdr.String(), jwksDirective(jw.url(), ""), ag.addr())
	})
	if err != nil {
		t.Fatal(err)
	}
	return ag, key, sc
}

// TestPlaceholders: every decision (allow and deny) sets the placeholders
// before the next handler runs; header, matcher and log see them; a denied
// call's identity placeholders stay empty, even when its token verified.
func TestPlaceholders(t *testing.T) {
	ag, key, sc := startPlaceholderGate(t)

	t.Run("allowed job.start reaches the agent, headers carry the verified context", func(t *testing.T) {
		ag.reset()
		claims := baseClaims()
		r := sc.rpc(t, freshJobStart(t), key.mint(t, claims))
		if a := decodeRPC(t, r); a.Error != nil {
			t.Fatalf("refused: %s", r.Body)
		}
		if ag.count.Load() != 1 {
			t.Fatalf("agent received %d requests, want 1", ag.count.Load())
		}
		want := map[string]string{
			"X-Auth-User": "workspace_123", "X-Sv-Workspace": "workspace_123", "X-Sv-Slug": "acme",
			"X-Sv-Grant": "grant-1", "X-Sv-Agent-Slug": testAgent, "X-Sv-Agent-Id": testAgentID,
			"X-Sv-Jti": claims["jti"].(string), "X-Sv-Mode": "token", "X-Sv-Route": "controller",
			"X-Sv-Target": "job.start", "X-Sv-Outcome": "allow", "X-Sv-Code": "token",
			// not one of ours: left to Caddy, which keeps an unknown placeholder as text in headers
			"X-Sv-Unknown-Key": "{supervaizer.no_such_placeholder}",
		}
		wantHeaders(t, r.Header, want)
	})

	t.Run("a matcher on the placeholders routes to respond", func(t *testing.T) {
		ag.reset()
		r := sc.rpc(t, actionFor(t, "job.sync"), key.mint(t, baseClaims()))
		if r.Status != 200 || string(r.Body) != "answered by Caddy for acme" {
			t.Fatalf("want Caddy's respond, got %d %s", r.Status, r.Body)
		}
		nothingReached(t, ag)
		wantHeaders(t, r.Header, map[string]string{"X-Sv-Target": "job.sync", "X-Sv-Outcome": "allow", "X-Sv-Workspace": "workspace_123"})
	})

	denials := []struct {
		name, code string
		token      string
		body       []byte
	}{
		{"expired token", "workspace_authorization_expired",
			key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = time.Now().Unix() - 120 }), nil},
		{"verified token for another workspace", "workspace_authorization_wrong_workspace",
			key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = "workspace_999" }), nil},
		{"verified token without the action scope", "workspace_authorization_missing_scope",
			key.mintWith(t, func(c jwt.MapClaims) { c["scopes"] = []any{"supervaizer/action.invoke", "job.sync"} }), nil},
		{"no token", "workspace_authorization_missing", "", nil},
		{"job.sync with a bad signature (the matcher must not fire)", "workspace_authorization_bad_signature",
			newSigner(t, "k1").mint(t, baseClaims()), actionFor(t, "job.sync")},
	}
	for _, d := range denials {
		t.Run("denied: "+d.name, func(t *testing.T) {
			ag.reset()
			body := d.body
			if body == nil {
				body = freshJobStart(t)
			}
			r := sc.rpc(t, body, d.token)
			wantRPCError(t, r, -32030, d.code)
			nothingReached(t, ag)
			for _, h := range identityHeaders {
				if v := r.Header.Get(h); v != "" {
					t.Errorf("denied call: %s = %q, want empty", h, v)
				}
			}
			wantHeaders(t, r.Header, map[string]string{"X-Sv-Outcome": "deny", "X-Sv-Code": d.code, "X-Sv-Route": "controller"})
		})
	}

	t.Run("denied before the envelope: route and code still set", func(t *testing.T) {
		ag.reset()
		r := do(t, http.MethodPost, sc.base+"/a2a", jobStartBody(t)) // no API key
		wantDetail(t, r, 401, "Invalid or missing API key")
		nothingReached(t, ag)
		wantHeaders(t, r.Header, map[string]string{"X-Sv-Outcome": "deny", "X-Sv-Code": "api_key_missing", "X-Sv-Route": "controller", "X-Auth-User": ""})
	})

	t.Run("bootstrap: mode set, no identity", func(t *testing.T) {
		ag.reset()
		r := sc.rpc(t, actionFor(t, "workspace_binding.options"), "")
		if a := decodeRPC(t, r); a.Error != nil {
			t.Fatalf("bootstrap refused: %s", r.Body)
		}
		wantHeaders(t, r.Header, map[string]string{"X-Sv-Mode": "bootstrap", "X-Sv-Outcome": "allow", "X-Auth-User": "", "X-Sv-Grant": ""})
	})

	t.Run("data route", func(t *testing.T) {
		ag.reset()
		url := sc.base + "/api/agents/" + testAgent + "/data/contacts/"
		r := do(t, "GET", url, nil, "X-API-Key", testKey, "X-Supervaize-Workspace-Id", "workspace_123",
			"X-Supervaize-Workspace-Authorization", "Bearer "+dataToken(t, key, "resource.contacts.list"))
		if r.Status != 200 {
			t.Fatalf("data list: %d %s", r.Status, r.Body)
		}
		wantHeaders(t, r.Header, map[string]string{"X-Sv-Route": "data", "X-Sv-Target": "resource.contacts.list", "X-Auth-User": "workspace_123"})
		ag.reset()
		r = do(t, "GET", url, nil, "X-API-Key", testKey, "X-Supervaize-Workspace-Id", "workspace_999",
			"X-Supervaize-Workspace-Authorization", "Bearer "+dataToken(t, key, "resource.contacts.list"))
		wantDetail(t, r, 403, "")
		nothingReached(t, ag)
		wantHeaders(t, r.Header, map[string]string{"X-Sv-Outcome": "deny", "X-Sv-Code": "workspace_authorization_wrong_workspace", "X-Auth-User": "", "X-Sv-Workspace": ""})
	})

	t.Run("access log fields from the placeholders", func(t *testing.T) {
		var allow, deny bool
		eventually(t, 5*time.Second, "access log lines with the placeholder fields", func() bool {
			allow, deny = false, false
			for _, line := range strings.Split(sc.logs(t), "\n") {
				var e map[string]any
				if json.Unmarshal([]byte(line), &e) != nil || e["msg"] != "handled request" {
					continue
				}
				switch {
				case e["sv_outcome"] == "allow" && e["sv_workspace"] == "workspace_123" && e["auth_user"] == "workspace_123" && e["sv_code"] == "token":
					allow = true
				case e["sv_outcome"] == "deny" && e["sv_code"] == "workspace_authorization_wrong_workspace":
					if e["sv_workspace"] != "" || e["auth_user"] != "" {
						t.Fatalf("denied access log line carries an identity: %s", line)
					}
					deny = true
				}
			}
			return allow && deny
		}, func() string {
			return fmt.Sprintf("access log lacks the placeholder fields (allow %v, deny %v):\n%s", allow, deny, sc.logs(t))
		})
	})
}

func wantHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("response header %s = %q, want %q", k, got, v)
		}
	}
}
