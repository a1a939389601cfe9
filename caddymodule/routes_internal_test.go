package caddymodule

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
)

// TestClassifyRoute: route classes, 400s for every spelling that could make
// the agent's router see another path, 405s, and DataResource operations.
func TestClassifyRoute(t *testing.T) {
	type want struct {
		class     routeClass
		status    int
		agent     string
		resource  string
		operation string
	}
	ok := func(c routeClass) want { return want{class: c} }
	notAllowed := func(c routeClass) want { return want{class: c, status: http.StatusMethodNotAllowed} }
	badPath := want{status: http.StatusBadRequest}
	data := func(op string) want {
		return want{class: classData, agent: "agent_interviewer", resource: "contacts", operation: op}
	}
	dataNotAllowed := want{class: classData, status: http.StatusMethodNotAllowed, agent: "agent_interviewer", resource: "contacts"}
	const d = "/api/agents/agent_interviewer/data/contacts"

	cases := []struct {
		method, path string
		want         want
	}{
		// Controller.
		{"POST", "/a2a", ok(classController)},
		{"POST", "/a2a/", ok(classController)},
		{"POST", "/%61%32%61", ok(classController)},
		{"POST", "/a2%61/", ok(classController)},
		{"GET", "/a2a", notAllowed(classController)},
		{"PUT", "/a2a", notAllowed(classController)},
		{"HEAD", "/a2a", notAllowed(classController)},
		{"post", "/a2a", notAllowed(classController)},
		{"POST", "/A2A", ok(classOther)},
		{"POST", "/a2a/x", ok(classOther)},
		{"POST", "/a2ax", ok(classOther)},
		// Events.
		{"GET", "/a2a/events", ok(classEvents)},
		{"HEAD", "/a2a/events", ok(classEvents)},
		{"GET", "/a2a/events/", ok(classEvents)},
		{"GET", "/a2a/%65vents", ok(classEvents)},
		{"POST", "/a2a/events", notAllowed(classEvents)},
		{"DELETE", "/a2a/events", notAllowed(classEvents)},
		// Public discovery and health.
		{"GET", "/.well-known/agents.json", ok(classPublic)},
		{"HEAD", "/.well-known/agents.json", ok(classPublic)},
		{"GET", "/.well-known/agents.json/", ok(classPublic)},
		{"GET", "/.well-known/health", ok(classPublic)},
		{"GET", "/.well-known/agents/agent_interviewer_agent.json", ok(classPublic)},
		{"GET", "/.well-known/agents/v1.2.0/agent_interviewer_agent.json", ok(classPublic)},
		{"GET", "/.well-known/agents/v2/x_agent.json", ok(classPublic)},
		{"GET", "/%2Ewell-known/health", ok(classPublic)},
		{"POST", "/.well-known/agents.json", notAllowed(classPublic)},
		{"PUT", "/.well-known/health", notAllowed(classPublic)},
		{"GET", "/.well-known/agents/_agent.json", ok(classOther)},
		{"GET", "/.well-known/agents/v/x_agent.json", ok(classOther)},
		{"GET", "/.well-known/agents/1.2.0/x_agent.json", ok(classOther)},
		{"GET", "/.well-known/agents/v1/v2/x_agent.json", ok(classOther)},
		{"GET", "/.well-known/agents/x_agent.jso", ok(classOther)},
		{"GET", "/.well-known/other", ok(classOther)},
		{"GET", "/.well-known", ok(classOther)},
		{"GET", "/.well-known/Health", ok(classOther)},
		// Legacy v1 controller routes.
		{"GET", "/api/supervaizer", ok(classLegacy)},
		{"GET", "/api/supervaizer/agents/x", ok(classLegacy)},
		{"POST", "/api/supervaizer/agents/x/jobs", ok(classLegacy)},
		{"DELETE", "/api/supervaizer/x/", ok(classLegacy)},
		{"GET", "/api/supervaizerx", ok(classOther)},
		// DataResource.
		{"GET", d + "/", data("list")},
		{"HEAD", d + "/", data("list")},
		{"GET", d, data("list")},
		{"POST", d + "/", data("create")},
		{"PUT", d + "/", dataNotAllowed},
		{"DELETE", d + "/", dataNotAllowed},
		{"PATCH", d + "/", dataNotAllowed},
		{"GET", d + "/item-1", data("get")},
		{"HEAD", d + "/item-1", data("get")},
		{"GET", d + "/item-1/", data("get")},
		{"PUT", d + "/item-1", data("update")},
		{"DELETE", d + "/item-1", data("delete")},
		{"POST", d + "/item-1", dataNotAllowed},
		{"PATCH", d + "/item-1", dataNotAllowed},
		{"POST", d + "/import/", data("import")},
		{"POST", d + "/import", data("import")},
		{"POST", d + "/%69mport/", data("import")},
		{"GET", d + "/import/", dataNotAllowed},
		{"PUT", d + "/import/", dataNotAllowed},
		{"DELETE", d + "/import/", dataNotAllowed},
		{"GET", d + "/import", data("get")},
		{"PUT", d + "/import", data("update")},
		{"DELETE", d + "/import", data("delete")},
		{"GET", "/api/agents/agent_interviewer/data/contacts/item%20one", data("get")},
		{"GET", d + "/item-1/extra", ok(classOther)},
		{"GET", d + "/item-1/extra/", ok(classOther)},
		{"GET", "/api/agents/agent_interviewer/data", ok(classOther)},
		{"GET", "/api/agents/agent_interviewer/data/", ok(classOther)},
		{"GET", "/api/agents/agent_interviewer/other/contacts/", ok(classOther)},
		{"GET", "/api/agents/agent_interviewer/Data/contacts/", ok(classOther)},
		{"GET", "/API/agents/agent_interviewer/data/contacts/", ok(classOther)},
		// Other.
		{"GET", "/", ok(classOther)},
		{"GET", "/docs", ok(classOther)},
		{"GET", "/openapi.json", ok(classOther)},
		{"GET", "/a2a...", ok(classOther)},
		{"GET", "/.../a2a", ok(classOther)},
		{"GET", "/api", ok(classOther)},
		{"POST", "/a2a+", ok(classOther)},

		// 400: encoded slash or backslash.
		{"GET", "/a2a%2Fevents", badPath},
		{"GET", "/a2a%2fevents", badPath},
		{"POST", "/a2a%5C", badPath},
		{"POST", "/a2a%5c", badPath},
		{"GET", d + "%2Fitem", badPath},
		{"GET", "/api%2Fsupervaizer/x", badPath},
		// 400: does not decode.
		{"POST", "/a2a%ZZ", badPath},
		{"POST", "/a2a%", badPath},
		{"POST", "/a2a%2", badPath},
		{"POST", "/a2a%%32", badPath},
		// 400: not starting with /.
		{"POST", "a2a", badPath},
		{"POST", "", badPath},
		{"OPTIONS", "*", badPath},
		{"GET", "%2Fa2a", badPath},
		// 400: NUL, backslash, ';'.
		{"POST", "/a2a%00", badPath},
		{"POST", "/%00/a2a", badPath},
		{"POST", "/a2a\x00", badPath},
		{"POST", `/a2a\`, badPath},
		{"GET", `/x\..\a2a`, badPath},
		{"POST", "/a2a;x=1", badPath},
		{"POST", "/a2a%3Bx", badPath},
		{"POST", "/a2a%3b", badPath},
		{"GET", d + ";x/", badPath},
		// 400: empty segment.
		{"POST", "//a2a", badPath},
		{"POST", "/a2a//", badPath},
		{"GET", "/api//supervaizer/x", badPath},
		{"GET", "/api/agents//data/contacts/", badPath},
		{"GET", d + "//", badPath},
		{"GET", "///", badPath},
		{"GET", "//", badPath}, // "//" is an empty segment too (doc: "an empty segment ("//")")
		// 400: dot segments, plain and percent-encoded.
		{"POST", "/./a2a", badPath},
		{"POST", "/a2a/.", badPath},
		{"POST", "/a2a/./", badPath},
		{"POST", "/a2a/..", badPath},
		{"POST", "/x/../a2a", badPath},
		{"POST", "/..", badPath},
		{"POST", "/.", badPath},
		{"POST", "/%2e%2e/a2a", badPath},
		{"POST", "/x/%2E%2E/a2a", badPath},
		{"POST", "/x/.%2e/a2a", badPath},
		{"POST", "/x/%2e./a2a", badPath},
		{"POST", "/%2e/a2a", badPath},
		{"GET", "/.well-known/health/../../a2a", badPath},
		{"GET", "/.well-known/%2e%2e/a2a/events", badPath},
		{"GET", d + "/%2e%2e/", badPath},
		{"GET", d + "/..", badPath},
		{"GET", d + "/./", badPath},
	}
	for _, c := range cases {
		got := classifyRoute(c.method, c.path)
		w := c.want
		if got.status != w.status {
			t.Errorf("%s %q: status %d (%s), want %d", c.method, c.path, got.status, got.reason, w.status)
			continue
		}
		if got.status == http.StatusBadRequest {
			if got.reason == "" {
				t.Errorf("%s %q: 400 without a reason", c.method, c.path)
			}
			continue
		}
		if got.class != w.class || got.agentSlug != w.agent || got.resource != w.resource || got.operation != w.operation {
			t.Errorf("%s %q: %s agent=%q resource=%q op=%q, want %s agent=%q resource=%q op=%q",
				c.method, c.path, got.class, got.agentSlug, got.resource, got.operation,
				w.class, w.agent, w.resource, w.operation)
		}
		if got.status == http.StatusMethodNotAllowed && got.reason == "" {
			t.Errorf("%s %q: 405 without a reason", c.method, c.path)
		}
	}
}

// TestRouteKeyScopeAndDataScopes: the X-API-Key scope each class needs, and
// the resource scope of a DataResource route.
func TestRouteKeyScopeAndDataScopes(t *testing.T) {
	cases := []struct {
		class  routeClass
		method string
		want   string
	}{
		{classPublic, "GET", ""},
		{classPublic, "POST", ""},
		{classController, "POST", "write"},
		{classEvents, "GET", "read"},
		{classData, "GET", "read"},
		{classData, "HEAD", "read"},
		{classData, "POST", "write"},
		{classData, "DELETE", "write"},
		{classLegacy, "GET", "read"},
		{classLegacy, "PUT", "write"},
		{classOther, "GET", "read"},
		{classOther, "PATCH", "write"},
	}
	for _, c := range cases {
		if got := (route{class: c.class}).keyScope(c.method); got != c.want {
			t.Errorf("%s %s: key scope %q, want %q", c.class, c.method, got, c.want)
		}
	}
	for _, op := range []struct{ method, path, scope string }{
		{"GET", "/api/agents/a/data/contacts/", "resource.contacts.list"},
		{"GET", "/api/agents/a/data/contacts/1", "resource.contacts.get"},
		{"POST", "/api/agents/a/data/contacts/", "resource.contacts.create"},
		{"PUT", "/api/agents/a/data/contacts/1", "resource.contacts.update"},
		{"DELETE", "/api/agents/a/data/contacts/1", "resource.contacts.delete"},
		{"POST", "/api/agents/a/data/contacts/import/", "resource.contacts.import"},
		{"GET", "/api/agents/a/data/campaign%20contacts/", "resource.campaign contacts.list"},
	} {
		r := classifyRoute(op.method, op.path)
		if s := r.dataScopes(); len(s) != 1 || s[0] != op.scope {
			t.Errorf("%s %s: scopes %q, want %q", op.method, op.path, s, op.scope)
		}
	}
	for c, name := range classNames {
		if routeClass(c).String() != name {
			t.Errorf("class %d named %q", c, routeClass(c).String())
		}
	}
}

// metaHeader builds a DataResource request header with mission id and
// metadata values (nil: header absent).
func metaHeader(missionID *string, metadata ...string) http.Header {
	h := http.Header{}
	if missionID != nil {
		h.Set(headerMissionID, *missionID)
	}
	for _, m := range metadata {
		h.Add(headerMissionMetadata, m)
	}
	return h
}

func TestCheckMissionMetadata(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	padded := base64.URLEncoding.EncodeToString
	mid := "mission_123"
	blank := "  "
	// An object of exactly n encoded bytes (unpadded).
	objOfEncodedLen := func(n int) string {
		raw := n * 3 / 4 // n multiple of 4: exact
		return enc([]byte(`{"a":"` + strings.Repeat("x", raw-8) + `"}`))
	}
	if l := len(objOfEncodedLen(4096)); l != 4096 {
		t.Fatalf("helper: %d", l)
	}
	// 3070 raw bytes: 4094 unpadded, 4096 padded.
	padTo4096 := padded([]byte(`{"a":"` + strings.Repeat("x", 3070-8) + `"}`))
	if len(padTo4096) != 4096 || !strings.HasSuffix(padTo4096, "==") {
		t.Fatalf("helper: %d %q", len(padTo4096), padTo4096[len(padTo4096)-3:])
	}

	cases := []struct {
		name    string
		h       http.Header
		wantErr string // substring of the detail; "" for accepted
	}{
		{"absent", metaHeader(&mid), ""},
		{"absent, no mission id", metaHeader(nil), ""},
		{"object", metaHeader(&mid, enc([]byte(`{"campaign":"c1","n":[1,2]}`))), ""},
		{"empty object", metaHeader(&mid, enc([]byte(`{}`))), ""},
		{"padded", metaHeader(&mid, padded([]byte(`{"a":1}`))), ""},
		{"unicode", metaHeader(&mid, enc([]byte(`{"é":"日本"}`))), ""},
		{"nested", metaHeader(&mid, enc([]byte(`{"a":{"b":{"c":[{}]}}}`))), ""},
		{"exactly 4096 bytes", metaHeader(&mid, objOfEncodedLen(4096)), ""},
		{"4096 bytes with padding", metaHeader(&mid, padTo4096), ""},

		{"no mission id", metaHeader(nil, enc([]byte(`{}`))), "requires X-Supervaize-Mission-Id"},
		{"blank mission id", metaHeader(&blank, enc([]byte(`{}`))), "requires X-Supervaize-Mission-Id"},
		{"4097 bytes", metaHeader(&mid, padTo4096+"="), "larger than 4096"},
		{"4100 bytes", metaHeader(&mid, objOfEncodedLen(4100)), "larger than 4096"},
		{"huge", metaHeader(&mid, strings.Repeat("A", 1<<20)), "larger than 4096"},
		{"mission id checked before size", metaHeader(nil, strings.Repeat("A", 5000)), "requires X-Supervaize-Mission-Id"},
		{"not base64", metaHeader(&mid, "!!!!"), "not base64url"},
		{"impossible length", metaHeader(&mid, "e30xx"), "not base64url"},
		{"space inside", metaHeader(&mid, "e3 0"), "not base64url"},
		{"padding in the middle", metaHeader(&mid, "e3=0"), "not base64url"},
		{"array", metaHeader(&mid, enc([]byte(`[]`))), "JSON object"},
		{"string", metaHeader(&mid, enc([]byte(`"{}"`))), "JSON object"},
		{"null", metaHeader(&mid, enc([]byte(`null`))), "JSON object"},
		{"number", metaHeader(&mid, enc([]byte(`1`))), "JSON object"},
		{"truncated object", metaHeader(&mid, enc([]byte(`{"a":1`))), "JSON object"},
		{"trailing data", metaHeader(&mid, enc([]byte(`{} {}`))), "JSON object"},
		{"invalid UTF-8", metaHeader(&mid, enc([]byte("{\"a\":\"\xff\"}"))), "JSON object"},
		{"UTF-8 BOM", metaHeader(&mid, enc([]byte("\xef\xbb\xbf{}"))), "JSON object"},
		{"NaN", metaHeader(&mid, enc([]byte(`{"a":NaN}`))), "JSON object"},
		{"duplicate key", metaHeader(&mid, enc([]byte(`{"a":1,"a":2}`))), "JSON object"},
		{"escaped duplicate key", metaHeader(&mid, enc([]byte(`{"a":1,"\u0061":2}`))), "JSON object"},
		{"too deep", metaHeader(&mid, enc([]byte(`{"a":`+strings.Repeat("[", 64)+strings.Repeat("]", 64)+`}`))), "JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := checkMissionMetadata(c.h)
			if c.wantErr == "" {
				if got != "" {
					t.Fatalf("refused: %s", got)
				}
				return
			}
			if !strings.Contains(got, c.wantErr) {
				t.Fatalf("detail %q, want it to contain %q", got, c.wantErr)
			}
		})
	}
}

// TestTunnelRequest: every form of CONNECT, a :protocol pseudo-header as
// Go's HTTP/2 server (r.Header) and quic-go's HTTP/3 server (r.Proto)
// expose it, and every spelling of an HTTP/1.1 upgrade ask for a tunnel;
// ordinary requests of every version do not.
func TestTunnelRequest(t *testing.T) {
	req := func(method, proto string, major int, header ...string) *http.Request {
		r := &http.Request{Method: method, Proto: proto, ProtoMajor: major, Header: http.Header{}}
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Add(header[i], header[i+1])
		}
		return r
	}
	cases := []struct {
		name string
		r    *http.Request
		want string
	}{
		{"GET h1", req("GET", "HTTP/1.1", 1), ""},
		{"POST h1.0", req("POST", "HTTP/1.0", 1), ""},
		{"GET h2", req("GET", "HTTP/2.0", 2), ""},
		{"GET h3", req("GET", "HTTP/3.0", 3), ""},
		{"no Proto (a request built in code)", req("GET", "", 0), ""},
		{"Connection close, keep-alive, a header name", req("GET", "HTTP/1.1", 1, "Connection", "close, keep-alive, X-Foo"), ""},
		{"CONNECT h1", req("CONNECT", "HTTP/1.1", 1), tunnelConnect},
		{"connect lower case", req("connect", "HTTP/1.1", 1), tunnelConnect},
		{"CONNECT h2", req("CONNECT", "HTTP/2.0", 2), tunnelConnect},
		{"CONNECT h3", req("CONNECT", "HTTP/3.0", 3), tunnelConnect},
		{"extended CONNECT h2", req("CONNECT", "HTTP/2.0", 2, ":protocol", "websocket"), tunnelExtendedConnect},
		{"extended CONNECT h3", req("CONNECT", "websocket", 3), tunnelExtendedConnect},
		{":protocol without CONNECT", req("GET", "HTTP/2.0", 2, ":protocol", "websocket"), tunnelExtendedConnect},
		{"odd Proto without CONNECT", req("GET", "connect-udp", 3), tunnelExtendedConnect},
		{"Upgrade websocket", req("GET", "HTTP/1.1", 1, "Connection", "Upgrade", "Upgrade", "websocket"), tunnelUpgrade},
		{"Upgrade without Connection", req("GET", "HTTP/1.1", 1, "Upgrade", "h2c"), tunnelUpgrade},
		{"empty Upgrade", req("GET", "HTTP/1.1", 1, "Upgrade", ""), tunnelUpgrade},
		{"Connection upgrade among others", req("GET", "HTTP/1.1", 1, "Connection", "keep-alive, UPGRADE"), tunnelUpgrade},
		{"Connection upgrade in a second value", req("GET", "HTTP/1.1", 1, "Connection", "close", "Connection", " upgrade "), tunnelUpgrade},
		{"Upgrade over h3", req("GET", "HTTP/3.0", 3, "Upgrade", "websocket"), tunnelUpgrade},
	}
	for _, tc := range cases {
		if got := tunnelRequest(tc.r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
