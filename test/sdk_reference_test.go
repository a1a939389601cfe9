package test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The real SDK 1.8.0 server as the wire reference: one corpus of requests,
// each sent straight to the SDK server and through the sidecar in front of
// it, their answers compared (HTTP status, JSON-RPC id, code, data, message
// or detail, whether a handler ran). A difference is allowed only where the
// case names a row of the docs/sdk-differences.md "Where the sidecar differs from the SDK,
// on purpose" table, and each row must be shown by a case.

// refOutcome is what is compared of one answer.
type refOutcome struct {
	Status  int
	ID      string // the raw "id" member, "<absent>" when there is none
	Code    int
	Message string // error.message, or the FastAPI detail (JSON when not a string)
	Data    string // error.data, compact JSON ("" when absent)
	Ran     bool   // an action, surface or DataResource handler ran
}

func (o refOutcome) String() string {
	return fmt.Sprintf("status %d id %s code %d ran %v\n\t\tmessage %q\n\t\tdata %s", o.Status, o.ID, o.Code, o.Ran, o.Message, o.Data)
}

// outcomeOf reads r (and whether a handler ran: handlersBefore is the
// count of handler lines in the agent's log before the request).
func outcomeOf(r response, ag *sdkAgent, handlersBefore int) refOutcome {
	o := refOutcome{Status: r.Status, ID: "<absent>", Ran: handlerRuns(ag) > handlersBefore}
	var m map[string]json.RawMessage
	if json.Unmarshal(r.Body, &m) != nil {
		o.Message = "<not a JSON object> " + string(r.Body)
		return o
	}
	if id, ok := m["id"]; ok {
		o.ID = string(id)
	}
	if d, ok := m["detail"]; ok {
		var s string
		if json.Unmarshal(d, &s) == nil {
			o.Message = s
		} else {
			o.Message = string(d)
		}
	}
	var e struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if raw, ok := m["error"]; ok && json.Unmarshal(raw, &e) == nil {
		o.Code, o.Message = e.Code, e.Message
		o.Data = canonJSON(e.Data) // key order aside
	}
	return o
}

func handlerRuns(ag *sdkAgent) int {
	n := 0
	for _, e := range ag.entries("") {
		if e.Kind == "action" || e.Kind == "surface" || e.Kind == "data" {
			n++
		}
	}
	return n
}

// rowNormalizers turn the SDK's outcome into ours for the rows whose
// difference is exactly known, so that nothing else may differ.
var rowNormalizers = map[string]func(refOutcome) refOutcome{
	// data.errors entries without "input" and "url".
	"`-32602` `data.errors` entries": func(o refOutcome) refOutcome {
		var d map[string][]map[string]json.RawMessage
		if json.Unmarshal([]byte(o.Data), &d) != nil {
			return o
		}
		for _, e := range d["errors"] {
			delete(e, "input")
			delete(e, "url")
		}
		o.Data = compactJSON(d)
		return o
	},
}

// canonData is o with its data re-encoded with sorted keys (compactJSON).
func canonData(o refOutcome) refOutcome {
	var v any
	if json.Unmarshal([]byte(o.Data), &v) == nil {
		o.Data = compactJSON(v)
	}
	return o
}

func compactJSON(v any) string {
	b, _ := json.Marshal(v)
	var buf bytes.Buffer
	_ = json.Compact(&buf, b)
	return buf.String()
}

// refCase is one corpus entry: a request and, for an allowed difference,
// the README row (a substring of its first cell) it shows.
type refCase struct {
	name    string
	method  string
	path    string
	body    []byte
	headers []string
	row     string
}

// readmeDifferenceRows reads the first cell of each row of the README's table.
func readmeDifferenceRows(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/sdk-differences.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "## Where the sidecar differs from the SDK, on purpose")
	if i < 0 {
		t.Fatal("README has no section \"Where the sidecar differs from the SDK, on purpose\"")
	}
	s = s[i+3:]
	s = s[:strings.Index(s, "\n## ")]
	var rows []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| input ") {
			continue
		}
		rows = append(rows, strings.TrimSpace(strings.Split(line, " | ")[0][2:]))
	}
	if len(rows) == 0 {
		t.Fatal("no rows in the README's differences table")
	}
	return rows
}

// TestSDKReferenceCorpus runs the corpus against the SDK agent (JWKS
// variant: the SDK and the sidecar read the same JWKS) and the sidecar.
func TestSDKReferenceCorpus(t *testing.T) {
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL="+jw.url())...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "jwks_url "+jw.url()+"\n\t\t\tjwks_unknown_kid_interval 10ms",
		"\t\tmax_body_a2a 64KiB\n"))
	waitReady(t, sc)

	cases := refCorpus(t, key)
	// JWKS documents with unusable keys: both the SDK and the sidecar read
	// them on an unknown kid (the SDK keeps only good keys in its cache).
	jwkCases, setJWKS := refJWKSCorpus(t, key, jw)
	rows := readmeDifferenceRows(t)
	shown := map[string]bool{}
	run := func(c refCase) {
		t.Run(c.name, func(t *testing.T) {
			before := handlerRuns(ag)
			direct := outcomeOf(do(t, c.method, ag.base()+c.path, c.body, c.headers...), ag, before)
			before = handlerRuns(ag)
			via := outcomeOf(do(t, c.method, sc.base+c.path, c.body, c.headers...), ag, before)
			if c.row == "" {
				if direct != via {
					t.Errorf("the sidecar differs from the SDK outside the README's table:\n\tSDK     %v\n\tsidecar %v", direct, via)
				}
				return
			}
			row := ""
			for _, r := range rows {
				if strings.Contains(r, c.row) {
					row = r
				}
			}
			if row == "" {
				t.Fatalf("no README row contains %q", c.row)
			}
			if direct == via {
				t.Errorf("README row %q: no difference shown\n\tboth %v", row, direct)
			}
			if norm := rowNormalizers[c.row]; norm != nil && norm(direct) != canonData(via) {
				t.Errorf("README row %q: more differs than the row says:\n\tSDK     %v\n\tsidecar %v", row, norm(direct), canonData(via))
			}
			shown[row] = true
			t.Logf("README row %q:\n\tSDK     %v\n\tsidecar %v", row, direct, via)
		})
	}
	for _, c := range cases {
		run(c)
	}
	for i, c := range jwkCases {
		setJWKS(i)
		run(c)
	}
	shown[refVerifiedSlugRow(t, ag, sc, key)] = true
	// These two load a sidecar config of their own (one Caddy config runs
	// per test process: sc is gone after them), with the good JWKS back.
	jw.setKeys(key.jwk())
	keyLine := "jwks_url " + jw.url()
	shown[refLimitsRow(t, ag, keyLine, key)] = true
	shown[refReferencesRow(t, ag, keyLine, key)] = true
	shown[refBodyMemoryRow(t, ag, keyLine, key)] = true
	for _, r := range rows {
		if !shown[r] {
			t.Errorf("README row %q is shown by no corpus case", r)
		}
	}
}

// refVerifiedSlugRow shows the README row on empty workspace_slug: the SDK
// context carries "" either way (the answers agree), but through the
// sidecar the SDK receives no X-Supervaize-Verified-Workspace-Slug, while a
// token with a slug brings one.
func refVerifiedSlugRow(t *testing.T, ag *sdkAgent, sc *sidecar, key *signer) string {
	t.Helper()
	const row = "an empty `workspace_slug` or `agent_workspace_ref` in the token"
	for _, slug := range []string{"ws-a", ""} {
		tok := key.mintWith(t, func(c jwt.MapClaims) {
			for k, v := range sdkClaims("ws-a") {
				c[k] = v
			}
			c["workspace_slug"] = slug
		})
		body := sdkAction(t, "ws-a", "job.sync", func(r map[string]any) { r["workspace"] = map[string]any{"id": "ws-a"} })
		m := ag.mark()
		r := sc.rpc(t, body, tok)
		notWorkspaceRefusal(t, "job.sync", r.Body)
		got := nonCardRequests(ag.since(m))
		if len(got) != 1 || got[0].VerifiedSlug != (slug != "") {
			t.Fatalf("workspace_slug %q: the SDK received %+v", slug, got)
		}
	}
	return row
}

// refLimitsRow shows the README row on limits: a second sidecar in front
// of the same SDK agent with a rule of one job.sync an hour. The SDK
// dispatches every call; through the sidecar the second is -32029 and the
// SDK receives nothing.
func refLimitsRow(t *testing.T, ag *sdkAgent, keyLine string, key *signer) string {
	t.Helper()
	const row = "a workspace over a `limits` rule"
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), keyLine,
		"\t\tlimits {\n\t\t\trate job.sync 1/h burst 1\n\t\t}\n"))
	waitReady(t, sc)
	tok := key.mint(t, sdkClaims("ws-a"))
	body := sdkAction(t, "ws-a", "job.sync", nil)
	before := handlerRuns(ag)
	direct := outcomeOf(do(t, "POST", ag.base()+"/a2a", body, rpcHeaders(tok)...), ag, before)
	if first := sc.rpc(t, body, tok); first.Status != 200 || strings.Contains(string(first.Body), `"error"`) {
		t.Fatalf("the first job.sync through the limited sidecar: %d %s", first.Status, first.Body)
	}
	m := ag.mark()
	before = handlerRuns(ag)
	via := outcomeOf(do(t, "POST", sc.base+"/a2a", body, rpcHeaders(tok)...), ag, before)
	if via.Code != -32029 || !strings.Contains(via.Data, `"rate_limited"`) || via.Ran {
		t.Fatalf("over the rule: %v", via)
	}
	if got := nonCardRequests(ag.since(m)); len(got) != 0 {
		t.Fatalf("a limited call reached the SDK: %+v", got)
	}
	if direct.Code == -32029 || !direct.Ran {
		t.Fatalf("the SDK itself limited the call: %v", direct)
	}
	t.Logf("README row %q:\n\tSDK     %v\n\tsidecar %v", row, direct, via)
	return row
}

// refReferencesRow shows the row on references: workspace B's job.sync
// naming the job_id workspace A used first is dispatched by the SDK and
// refused by a sidecar with a references block (-32030 wrong_workspace),
// the SDK receiving nothing.
func refReferencesRow(t *testing.T, ag *sdkAgent, keyLine string, key *signer) string {
	t.Helper()
	const row = "a workspace's call naming a job, case, step, draft session, request or DataResource item another workspace used or created first"
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), keyLine, "\t\treferences\n"))
	waitReady(t, sc)
	job := "job-" + randomID()
	withJob := func(ws string) []byte {
		return sdkAction(t, ws, "job.sync", func(r map[string]any) { r["job_id"] = job; delete(r, "draft_session_id") })
	}
	if first := sc.rpc(t, withJob("ws-a"), key.mint(t, sdkClaims("ws-a"))); first.Status != 200 || strings.Contains(string(first.Body), `"error"`) {
		t.Fatalf("workspace A's job.sync: %d %s", first.Status, first.Body)
	}
	tokB := key.mint(t, sdkClaims("ws-b"))
	before := handlerRuns(ag)
	direct := outcomeOf(do(t, "POST", ag.base()+"/a2a", withJob("ws-b"), rpcHeaders(tokB)...), ag, before)
	m := ag.mark()
	before = handlerRuns(ag)
	via := outcomeOf(do(t, "POST", sc.base+"/a2a", withJob("ws-b"), rpcHeaders(tokB)...), ag, before)
	if via.Code != -32030 || !strings.Contains(via.Data, `"workspace_authorization_wrong_workspace"`) || via.Ran {
		t.Fatalf("B's call with A's job: %v", via)
	}
	if got := nonCardRequests(ag.since(m)); len(got) != 0 {
		t.Fatalf("a call with another workspace's job reached the SDK: %+v", got)
	}
	if direct.Code != 0 || !direct.Ran {
		t.Fatalf("the SDK itself refused the call: %v", direct)
	}
	t.Logf("README row %q:\n\tSDK     %v\n\tsidecar %v", row, direct, via)
	return row
}

// refBodyMemoryRow shows the README row on body_memory: a sidecar whose
// budget is one max_body_a2a body holds a declared 64 KiB body that stops
// after 40,000 bytes (the budget is charged as bytes arrive: its buffer has
// grown to the whole declared length); until that body is released every other /a2a call is 503
// server_busy, which the SDK (no such bound) dispatches.
func refBodyMemoryRow(t *testing.T, ag *sdkAgent, keyLine string, key *signer) string {
	t.Helper()
	const row = "`/a2a` calls while the process holds `body_memory` of bodies"
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), keyLine,
		"\t\tmax_body_a2a 64KiB\n\t\tbody_memory 64KiB\n\t\tbody_timeout 1m\n"))
	waitReady(t, sc)
	tok := key.mint(t, sdkClaims("ws-a"))
	body := sdkAction(t, "ws-a", "job.sync", nil)
	before := handlerRuns(ag)
	direct := outcomeOf(do(t, "POST", ag.base()+"/a2a", body, rpcHeaders(tok)...), ag, before)

	held, err := net.Dial("tcp", strings.TrimPrefix(sc.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	fmt.Fprintf(held, "POST /a2a HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nX-API-Key: %s\r\n"+
		"X-Supervaize-Workspace-Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n{%s",
		strings.TrimPrefix(sc.base, "http://"), testKey, tok, 64<<10, strings.Repeat(" ", 40000))
	var via refOutcome
	// The budget's capacity is the largest body_memory of the gates still
	// loaded (gate/body.go): the earlier tests' configs leave it only
	// once their servers have stopped, which a loaded box can delay.
	eventually(t, 45*time.Second, "the held body takes the whole budget", func() bool {
		before = handlerRuns(ag)
		via = outcomeOf(do(t, "POST", sc.base+"/a2a", body, rpcHeaders(tok)...), ag, before)
		return via.Status == 503
	}, func() string {
		// What held the budget's capacity up, or what the held body did
		// (an answer on its connection: it was refused, not held).
		held.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		answer, _ := io.ReadAll(io.LimitReader(held, 2048))
		return fmt.Sprintf("last call: %v\nbody_memory: %v\nthe held body's connection: %q",
			via, sidecarStatus(t, sc)["body_memory"], answer)
	})
	if !strings.Contains(via.Data, `"server_busy"`) || via.Ran {
		t.Fatalf("over the budget: %v", via)
	}
	if direct.Status != 200 || !direct.Ran {
		t.Fatalf("the SDK itself refused the call: %v", direct)
	}
	t.Logf("README row %q:\n\tSDK     %v\n\tsidecar %v", row, direct, via)
	return row
}

// refCorpus is every case but the JWKS documents'.
func refCorpus(t *testing.T, key *signer) []refCase {
	t.Helper()
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := sdkClaims("ws-a")
		if edit != nil {
			edit(c)
		}
		return c
	}
	tok := func(edit func(jwt.MapClaims)) string { return key.mint(t, claims(edit)) }
	good := tok(nil)
	enc := base64.RawURLEncoding
	rawClaims := func(edit func(jwt.MapClaims)) string {
		b, _ := json.Marshal(claims(edit))
		return string(b)
	}
	hdrK1 := `{"alg":"EdDSA","kid":"k1","typ":"JWT"}`
	sync := func(edit func(map[string]any)) []byte { return sdkAction(t, "ws-a", "job.sync", edit) }
	a2a := func(name string, body []byte, token string, row string) refCase {
		return refCase{name: name, method: "POST", path: "/a2a", body: body, headers: rpcHeaders(token), row: row}
	}
	a2aH := func(name string, body []byte, row string, headers ...string) refCase {
		return refCase{name: name, method: "POST", path: "/a2a", body: body, headers: headers, row: row}
	}
	job := string(sync(nil))
	withID := func(id string) []byte { return []byte(strings.Replace(job, `"id":7`, `"id":`+id, 1)) }
	now := time.Now().Unix()

	cs := []refCase{
		// allowed
		a2a("job.sync", sync(nil), good, ""),
		a2a("surface job.start", sdkSurface(t, "ws-a", "job.start"), good, ""),
		a2a("bootstrap action without a token", sdkAction(t, "ws-a", "workspace_binding.options", nil), "", ""),
		a2a("bootstrap surface without a token", sdkSurface(t, "ws-a", "workspace_binding.create"), "", ""),
		a2a("declared but unregistered action", sdkAction(t, "ws-a", "job.stop", nil), tok(func(c jwt.MapClaims) { c["scopes"] = append(c["scopes"].([]any), "job.stop") }), ""),
		a2a("declared but unregistered surface", sdkSurface(t, "ws-a", "case.step.detail"), tok(func(c jwt.MapClaims) { c["scopes"] = append(c["scopes"].([]any), "case.step.detail") }), ""),
		// token: claims
		a2a("no token", sync(nil), "", ""),
		a2a("expired", sync(nil), tok(func(c jwt.MapClaims) { c["exp"] = now - 3600 }), ""),
		a2a("expired within leeway", sync(nil), tok(func(c jwt.MapClaims) { c["exp"] = now - 10 }), ""),
		a2a("iat in the future", sync(nil), tok(func(c jwt.MapClaims) { c["iat"] = now + 3600 }), ""),
		a2a("iat null", sync(nil), tok(func(c jwt.MapClaims) { c["iat"] = nil }), ""),
		a2a("wrong issuer", sync(nil), tok(func(c jwt.MapClaims) { c["iss"] = "https://other.test" }), ""),
		a2a("wrong audience", sync(nil), tok(func(c jwt.MapClaims) { c["aud"] = "supervaizer-server:other" }), ""),
		a2a("audience list", sync(nil), tok(func(c jwt.MapClaims) { c["aud"] = []any{"x", "supervaizer-server:" + sdkServerID} }), ""),
		a2a("wrong server_id", sync(nil), tok(func(c jwt.MapClaims) { c["server_id"] = "other-server" }), ""),
		a2a("wrong agent_slug", sync(nil), tok(func(c jwt.MapClaims) { c["agent_slug"] = "other-agent" }), ""),
		a2a("wrong agent_id", sync(nil), tok(func(c jwt.MapClaims) { c["agent_id"] = "other-id" }), ""),
		a2a("wrong workspace_id", sync(nil), tok(func(c jwt.MapClaims) { c["workspace_id"] = "ws-b" }), ""),
		a2a("wrong workspace_slug", sync(nil), tok(func(c jwt.MapClaims) { c["workspace_slug"] = "other" }), ""),
		a2a("missing scope", sync(nil), tok(func(c jwt.MapClaims) { c["scopes"] = []any{"supervaizer/action.invoke"} }), ""),
		a2a("scopes absent", sync(nil), tok(func(c jwt.MapClaims) { delete(c, "scopes") }), ""),
		a2a("grant_id absent", sync(nil), tok(func(c jwt.MapClaims) { delete(c, "grant_id") }), "`invalid_claims` message"),
		a2a("empty grant_id", sync(nil), tok(func(c jwt.MapClaims) { c["grant_id"] = "" }), "an empty `grant_id`"),
		a2a("control character in jti", sync(nil), tok(func(c jwt.MapClaims) { c["jti"] = "tok\n1" }),
			"a carried claim with a control character"),
		a2a("exp a string", sync(nil), tok(func(c jwt.MapClaims) { c["exp"] = fmt.Sprint(now + 600) }), "`iat` or `exp` as a string"),
		a2a("nbf in the future", sync(nil), tok(func(c jwt.MapClaims) { c["nbf"] = now + 3600 }), "`nbf` in the future"),
		a2a("empty workspace ids", sdkAction(t, "", "job.sync", nil), tok(func(c jwt.MapClaims) { c["workspace_id"] = "" }), "both have an empty workspace id"),
		// token: header and encoding
		a2a("bad signature", sync(nil), newSigner(t, "k1").mint(t, claims(nil)), ""),
		a2a("two segments", sync(nil), strings.Join(strings.Split(good, ".")[:2], "."), ""),
		a2a("not base64", sync(nil), "a.b.c", ""),
		a2a("header not an object", sync(nil), rawToken(key, `[1]`, rawClaims(nil)), ""),
		a2a("alg HS256", sync(nil), rawToken(key, `{"alg":"HS256","kid":"k1"}`, rawClaims(nil)), ""),
		a2a("alg none", sync(nil), rawToken(nil, `{"alg":"none","kid":"k1"}`, rawClaims(nil)), ""),
		a2a("no kid", sync(nil), rawToken(key, `{"alg":"EdDSA"}`, rawClaims(nil)), ""),
		a2a("unknown kid", sync(nil), rawToken(key, `{"alg":"EdDSA","kid":"k-unknown"}`, rawClaims(nil)), ""),
		a2a("padded signature", sync(nil), good+"==", "a token segment with `=` padding"),
		a2a("crit header", sync(nil), rawToken(key, `{"alg":"EdDSA","kid":"k1","crit":["x"],"x":1}`, rawClaims(nil)), "a token with a `crit` header"),
		a2a("claims not an object", sync(nil), enc.EncodeToString([]byte(hdrK1))+"."+enc.EncodeToString([]byte(`"x"`))+".AA", ""),
		// header forms
		a2aH("token without Bearer", sync(nil), "", "X-API-Key", testKey, "Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", good),
		a2aH("token with lower-case bearer", sync(nil), "", "X-API-Key", testKey, "Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "bearer "+good),
		a2aH("token with spaces", sync(nil), "", "X-API-Key", testKey, "Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer   "+good+"  "),
		a2aH("empty token header", sync(nil), "", "X-API-Key", testKey, "Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", ""),
		a2aH("Bearer alone", sync(nil), "", "X-API-Key", testKey, "Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "),
		a2aH("two token headers", sync(nil), "two `X-Supervaize-Workspace-Authorization` headers", "X-API-Key", testKey, "Content-Type", "application/json",
			"X-Supervaize-Workspace-Authorization", "Bearer "+good, "X-Supervaize-Workspace-Authorization", "Bearer "+good),
		// API key
		a2aH("no API key", sync(nil), "", "Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "+good),
		a2aH("wrong API key", sync(nil), "", "X-API-Key", "nope", "Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "+good),
		// body: envelope and ids
		a2a("unknown method", []byte(`{"jsonrpc":"2.0","id":3,"method":"supervaizer/other","params":{}}`), good, ""),
		a2a("method absent", []byte(`{"jsonrpc":"2.0","id":4,"params":{}}`), good, "`-32602` `data.errors` entries"),
		a2a("params absent", []byte(`{"jsonrpc":"2.0","id":4,"method":"supervaizer/action.invoke"}`), good, "`-32602` `data.errors` entries"),
		a2a("request_id absent", sync(func(r map[string]any) { delete(r, "request_id") }), good, "`-32602` `data.errors` entries"),
		a2a("id a string", withID(`"abc"`), good, ""),
		a2a("id null, refused", withID(`null`), "", "a JSON-RPC answer to `\"id\": null`"),
		a2a("id null, allowed", withID(`null`), good, ""),
		a2a("id 1.5", withID(`1.5`), good, "an `id` the SDK cannot echo"),
		a2a("body not JSON", []byte(`{"jsonrpc":`), good, "a body that is not JSON"),
		a2a("body a list", []byte(`[1]`), good, "a body that is not JSON"),
		a2a("duplicate key", []byte(strings.Replace(job, `"id":7`, `"id":7,"id":8`, 1)), good, "a duplicate key"),
		a2a("lone surrogate", []byte(strings.Replace(job, `"input":{`, `"input":{"s":"\ud800",`, 1)), good, "a lone UTF-16 surrogate"),
		a2a("caller-supplied workspace_authorization", sync(func(r map[string]any) { r["workspace_authorization"] = map[string]any{"grant_id": "x"} }), good, "a caller-supplied `workspace_authorization`"),
		a2a("body over max_body_a2a", sync(func(r map[string]any) { r["input"] = map[string]any{"s": strings.Repeat("x", 70<<10)} }), good, "an `/a2a` body over `max_body_a2a`"),
		a2a("bootstrap for another agent", sdkAction(t, "ws-a", "workspace_binding.options", func(r map[string]any) { r["agent_slug"] = "other-agent" }), "", ""),
		a2a("agent slug of another agent with a token", sync(func(r map[string]any) { r["agent_slug"] = "other-agent" }), good, ""),
		// time boundaries (leeway 30 s on both sides; margins keep a
		// second's tick between the two sends from changing the answer)
		a2a("exp 20 s ago", sync(nil), tok(func(c jwt.MapClaims) { c["exp"] = now - 20 }), ""),
		a2a("exp 45 s ago", sync(nil), tok(func(c jwt.MapClaims) { c["exp"] = now - 45 }), ""),
		a2a("iat 20 s ahead", sync(nil), tok(func(c jwt.MapClaims) { c["iat"] = now + 20 }), ""),
		a2a("iat 45 s ahead", sync(nil), tok(func(c jwt.MapClaims) { c["iat"] = now + 45 }), ""),
		a2a("exp a float", sync(nil), tok(func(c jwt.MapClaims) { c["exp"] = float64(now+600) + 0.5 }), "`invalid_claims` message"),
		// more claims
		a2a("audience list without ours", sync(nil), tok(func(c jwt.MapClaims) { c["aud"] = []any{"a", "b"} }), ""),
		a2a("scopes empty", sync(nil), tok(func(c jwt.MapClaims) { c["scopes"] = []any{} }), "`invalid_claims` message"),
		a2a("scopes a string", sync(nil), tok(func(c jwt.MapClaims) { c["scopes"] = "job.sync" }), "`invalid_claims` message"),
		a2a("extra claims", sync(nil), tok(func(c jwt.MapClaims) { c["extra"] = map[string]any{"a": 1} }), ""),
		a2a("kid a number", sync(nil), rawToken(key, `{"alg":"EdDSA","kid":1}`, rawClaims(nil)), ""),
		// more body
		a2a("jsonrpc 1.0", []byte(strings.Replace(job, `"jsonrpc":"2.0"`, `"jsonrpc":"1.0"`, 1)), good, "`-32602` `data.errors` entries"),
		a2a("unknown request field", sync(func(r map[string]any) { r["unknown_field"] = 1 }), good, ""),
		a2a("mission id mismatch", sync(func(r map[string]any) { r["mission"] = map[string]any{"id": "other"} }), good, "`-32602` `data.errors` entries"),
		a2a("empty idempotency_key", sdkAction(t, "ws-a", "job.start", func(r map[string]any) { r["idempotency_key"] = "" }), good, ""),
		a2a("params without the wrapper", []byte(`{"jsonrpc":"2.0","id":9,"method":"supervaizer/action.invoke","params":`+mustJSON(func() map[string]any {
			var env map[string]any
			_ = json.Unmarshal(sync(nil), &env)
			return env["params"].(map[string]any)["action_request"].(map[string]any)
		}())+`}`), good, ""),
		// rows of issue 33 (each also shown by the generated corpus)
		a2a("exp beyond 64 bits", sync(nil), tok(func(c jwt.MapClaims) { c["exp"] = json.Number("9223372036854775808") }), "an `iat`, `exp` or `nbf` integer outside 64 bits"),
		a2a("nbf a word", sync(nil), tok(func(c jwt.MapClaims) { c["nbf"] = "soon" }), "`nbf` in the future"),
		a2a("dev a string", sync(nil), tok(func(c jwt.MapClaims) { c["dev"] = "yes" }), "a `dev` claim that is not a boolean"),
		a2a("claims JSON with a BOM", sync(nil), rawToken(key, hdrK1, "\ufeff"+rawClaims(nil)), "token claims JSON with a BOM"),
		a2a("claims JSON with workspace_id twice", sync(nil), rawToken(key, hdrK1, strings.Replace(rawClaims(nil), "{", `{"workspace_id":"ws-b",`, 1)), "token claims JSON with a BOM"),
		a2a("body with a BOM", append([]byte("\ufeff"), sync(nil)...), good, "a body with a UTF-8 BOM"),
		a2a("body with NaN", []byte(strings.Replace(string(sync(nil)), `"input":{`, `"input":{"n":NaN,`, 1)), good, "a body with a UTF-8 BOM"),
		a2a("body not UTF-8", []byte(strings.Replace(string(sync(nil)), `"input":{`, "\"input\":{\"s\":\"\xff\",", 1)), good, "a body that is not UTF-8"),
		a2a("body nested 70 levels", []byte(strings.Replace(string(sync(nil)), `"input":{`, `"input":{"d":`+strings.Repeat("[", 70)+strings.Repeat("]", 70)+`,`, 1)), good,
			"JSON nested deeper than 64 levels"),
		a2aH("body not JSON without a key", []byte(`{"jsonrpc":`), "an `/a2a` body FastAPI cannot read", "Content-Type", "application/json"),
		// The SDK fails on it and closes the connection: not one to reuse.
		a2aH("body as text/plain", sync(nil), "an `/a2a` body whose `Content-Type` is not JSON", "X-API-Key", testKey, "Content-Type", "text/plain",
			"X-Supervaize-Workspace-Authorization", "Bearer "+good, "Connection", "close"),
		a2aH("two API keys, the first right", sync(nil), "two `X-API-Key` headers", "X-API-Key", testKey, "X-API-Key", "nope", "Content-Type", "application/json",
			"X-Supervaize-Workspace-Authorization", "Bearer "+good),
		a2a("workspace_authorization a string", sync(func(r map[string]any) { r["workspace_authorization"] = "x" }), good, "a caller-supplied `workspace_authorization`"),
		a2a("empty aud", sync(nil), tok(func(c jwt.MapClaims) { c["aud"] = "" }), ""),
		a2a("empty aud list", sync(nil), tok(func(c jwt.MapClaims) { c["aud"] = []any{} }), ""),
		a2a("exp 1e17", sync(nil), tok(func(c jwt.MapClaims) { c["exp"] = json.Number("1e17") }), ""),
		a2a("exp 1e19", sync(nil), tok(func(c jwt.MapClaims) { c["exp"] = json.Number("1e19") }), "`invalid_claims` message"),
		a2a("bootstrap surface for another agent", []byte(strings.Replace(string(sdkSurface(t, "ws-a", "workspace_binding.create")), `"agent_slug":"`+sdkSlug+`"`, `"agent_slug":"other-agent"`, 1)), "", ""),
		a2a("bootstrap surface with a bad token", sdkSurface(t, "ws-a", "workspace_binding.create"), "a.b.c", ""),
		a2a("surface of another agent", []byte(strings.Replace(string(sdkSurface(t, "ws-a", "job.start")), `"agent_slug":"`+sdkSlug+`"`, `"agent_slug":"other-agent"`, 1)), good, ""),
	}
	return append(cs, refDataCorpus(t, key, good)...)
}

// refDataCorpus: DataResource route mutations.
func refDataCorpus(t *testing.T, key *signer, good string) []refCase {
	prefix := "/api/agents/" + sdkSlug + "/data/contacts/"
	meta := base64.RawURLEncoding.EncodeToString([]byte(`{"k":"v"}`))
	h := func(tok string, extra ...string) []string {
		out := []string{"X-API-Key", testKey, "Content-Type", "application/json", "X-Supervaize-Workspace-Id", "ws-a"}
		if tok != "" {
			out = append(out, "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
		}
		return append(out, extra...)
	}
	noScope := key.mintWith(t, func(c jwt.MapClaims) {
		for k, v := range sdkClaims("ws-a") {
			c[k] = v
		}
		c["scopes"] = []any{"resource.contacts.get"}
	})
	get := func(name string, path string, headers []string) refCase {
		return refCase{name: name, method: "GET", path: path, headers: headers}
	}
	return []refCase{
		get("data list", prefix, h(good)),
		get("data get", prefix+"c1", h(good)),
		get("data get unknown item", prefix+"nope", h(good)),
		get("data list without a token", prefix, h("")),
		get("data list without scope", prefix, h(noScope)),
		get("data list other workspace", prefix, []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Id", "ws-b", "X-Supervaize-Workspace-Authorization", "Bearer " + good}),
		get("data list with mission metadata", prefix, h(good, "X-Supervaize-Mission-Id", "m-1", "X-Supervaize-Mission-Metadata", meta)),
		get("data metadata without mission id", prefix, h(good, "X-Supervaize-Mission-Metadata", meta)),
		get("data metadata not base64url", prefix, h(good, "X-Supervaize-Mission-Id", "m-1", "X-Supervaize-Mission-Metadata", "***")),
		get("data metadata not an object", prefix, h(good, "X-Supervaize-Mission-Id", "m-1", "X-Supervaize-Mission-Metadata", base64.RawURLEncoding.EncodeToString([]byte(`[1]`)))),
		{name: "GET with a body on a public route", method: "GET", path: "/.well-known/health", body: []byte("{}"),
			row: "a GET or HEAD with a body"},
		{name: "data unknown resource", method: "GET", path: "/api/agents/" + sdkSlug + "/data/other/", headers: h(good),
			row: "a DataResource route of a resource the agent does not serve"},
		get("data metadata without mission id, no token", prefix, h("", "X-Supervaize-Mission-Metadata", meta)),
		get("data metadata wrong padding", prefix, h(good, "X-Supervaize-Mission-Id", "m-1", "X-Supervaize-Mission-Metadata", "e30==")),
		get("data metadata too long", prefix, h(good, "X-Supervaize-Mission-Id", "m-1", "X-Supervaize-Mission-Metadata", strings.Repeat("A", 4100))),
		{name: "data create", method: "POST", path: prefix, body: []byte(`{"id":"c9","email":"q@example.com"}`), headers: h(good)},
		{name: "data create body not an object", method: "POST", path: prefix, body: []byte(`[1]`), headers: h(good)},
		{name: "data delete without scope", method: "DELETE", path: prefix + "c9", headers: h(noScope)},
		{name: "data update unknown item", method: "PUT", path: prefix + "nope", body: []byte(`{"a":1}`), headers: h(good)},
		{name: "data import not a list", method: "POST", path: prefix + "import/", body: []byte(`{"a":1}`), headers: h(good)},
		get("data list without the trailing slash", strings.TrimSuffix(prefix, "/"), h(good)),
		get("data list wrong workspace slug", prefix, h(good, "X-Supervaize-Workspace-Slug", "other")),
		{name: "data POST import without the slash, no scope", method: "POST", path: prefix + "import", body: []byte(`[{"a":1}]`), headers: h(noScope),
			row: "a DataResource request its route would refuse"},
		get("data list of an agent not served", "/api/agents/other-agent/data/contacts/", h(good)),
		{name: "data PATCH of an agent not served", method: "PATCH", path: "/api/agents/other-agent/data/contacts/c1", body: []byte(`{}`), headers: h(good)},
		{name: "data list two workspace ids", method: "GET", path: prefix, headers: h(good, "X-Supervaize-Workspace-Id", "ws-b"),
			row: "two values of a DataResource context header"},
	}
}

// refJWKSCorpus: tokens whose kid names an unusable key of the JWKS
// document; setJWKS(i) publishes case i's document first.
func refJWKSCorpus(t *testing.T, key *signer, jw *jwksServer) ([]refCase, func(int)) {
	t.Helper()
	good := key.jwk()
	jwk := func(kid string, edit func(map[string]any)) map[string]any {
		k := key.jwk()
		k["kid"] = kid
		edit(k)
		return k
	}
	docs := []struct {
		name, kid string
		doc       string
	}{
		{"JWK not OKP", "k-rsa", mustJSON(map[string]any{"keys": []any{good, jwk("k-rsa", func(k map[string]any) { k["kty"] = "RSA" })}})},
		{"JWK without x", "k-nox", mustJSON(map[string]any{"keys": []any{good, jwk("k-nox", func(k map[string]any) { delete(k, "x") })}})},
		{"JWK x not 32 bytes", "k-short", mustJSON(map[string]any{"keys": []any{good, jwk("k-short", func(k map[string]any) { k["x"] = "AAAA" })}})},
		{"JWKS key not an object", "k-after", mustJSON(map[string]any{"keys": []any{5, good}})},
		{"JWKS keys not a list", "k-list", `{"keys":{"k1":1}}`},
	}
	var cases []refCase
	for _, d := range docs {
		tok := rawToken(key, `{"alg":"EdDSA","kid":"`+d.kid+`"}`, mustJSON(sdkClaims("ws-a")))
		cases = append(cases, refCase{name: d.name, method: "POST", path: "/a2a", body: sdkAction(t, "ws-a", "job.sync", nil), headers: rpcHeaders(tok)})
	}
	return cases, func(i int) { jw.setDoc(200, []byte(docs[i].doc)) }
}
