package gate

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// routeWant is what classifyRoute should say of one request.
type routeWant struct {
	class     routeClass
	status    int
	agent     string
	resource  string
	operation string
}

func wantOK(c routeClass) routeWant  { return routeWant{class: c} }
func want405(c routeClass) routeWant { return routeWant{class: c, status: http.StatusMethodNotAllowed} }
func wantData(op string) routeWant {
	return routeWant{class: classData, agent: "agent_interviewer", resource: "contacts", operation: op}
}

var (
	want400     = routeWant{status: http.StatusBadRequest}
	wantData405 = routeWant{class: classData, status: http.StatusMethodNotAllowed, agent: "agent_interviewer", resource: "contacts"}
)

// d is the DataResource collection of the classifyCases.
const d = "/api/agents/agent_interviewer/data/contacts"

// classifyCases: route classes, 400s for every spelling that could make the
// agent's router see another path, 405s, and DataResource operations.
var classifyCases = []struct {
	method, path string
	want         routeWant
}{
	// Controller.
	{"POST", "/a2a", wantOK(classController)},
	{"POST", "/a2a/", wantOK(classController)},
	{"POST", "/%61%32%61", wantOK(classController)},
	{"POST", "/a2%61/", wantOK(classController)},
	{"GET", "/a2a", want405(classController)},
	{"PUT", "/a2a", want405(classController)},
	{"HEAD", "/a2a", want405(classController)},
	{"post", "/a2a", want405(classController)},
	{"POST", "/A2A", wantOK(classOther)},
	{"POST", "/a2a/x", wantOK(classOther)},
	{"POST", "/a2ax", wantOK(classOther)},
	// Events.
	{"GET", "/a2a/events", wantOK(classEvents)},
	{"HEAD", "/a2a/events", wantOK(classEvents)},
	{"GET", "/a2a/events/", wantOK(classEvents)},
	{"GET", "/a2a/%65vents", wantOK(classEvents)},
	{"POST", "/a2a/events", want405(classEvents)},
	{"DELETE", "/a2a/events", want405(classEvents)},
	// Public discovery and health.
	{"GET", "/.well-known/agents.json", wantOK(classPublic)},
	{"HEAD", "/.well-known/agents.json", wantOK(classPublic)},
	{"GET", "/.well-known/agents.json/", wantOK(classPublic)},
	{"GET", "/.well-known/health", wantOK(classPublic)},
	{"GET", "/.well-known/agents/agent_interviewer_agent.json", wantOK(classPublic)},
	{"GET", "/.well-known/agents/v1.2.0/agent_interviewer_agent.json", wantOK(classPublic)},
	{"GET", "/.well-known/agents/v2/x_agent.json", wantOK(classPublic)},
	{"GET", "/%2Ewell-known/health", wantOK(classPublic)},
	{"POST", "/.well-known/agents.json", want405(classPublic)},
	{"PUT", "/.well-known/health", want405(classPublic)},
	{"GET", "/.well-known/agents/_agent.json", wantOK(classOther)},
	{"GET", "/.well-known/agents/v/x_agent.json", wantOK(classOther)},
	{"GET", "/.well-known/agents/1.2.0/x_agent.json", wantOK(classOther)},
	{"GET", "/.well-known/agents/v1/v2/x_agent.json", wantOK(classOther)},
	{"GET", "/.well-known/agents/x_agent.jso", wantOK(classOther)},
	{"GET", "/.well-known/other", wantOK(classOther)},
	{"GET", "/.well-known", wantOK(classOther)},
	{"GET", "/.well-known/Health", wantOK(classOther)},
	// Legacy v1 controller routes.
	{"GET", "/api/supervaizer", wantOK(classLegacy)},
	{"GET", "/api/supervaizer/agents/x", wantOK(classLegacy)},
	{"POST", "/api/supervaizer/agents/x/jobs", wantOK(classLegacy)},
	{"DELETE", "/api/supervaizer/x/", wantOK(classLegacy)},
	{"GET", "/api/supervaizerx", wantOK(classOther)},
	// DataResource.
	{"GET", d + "/", wantData("list")},
	{"HEAD", d + "/", wantData("list")},
	{"GET", d, wantData("list")},
	{"POST", d + "/", wantData("create")},
	{"PUT", d + "/", wantData405},
	{"DELETE", d + "/", wantData405},
	{"PATCH", d + "/", wantData405},
	{"GET", d + "/item-1", wantData("get")},
	{"HEAD", d + "/item-1", wantData("get")},
	{"GET", d + "/item-1/", wantData("get")},
	{"PUT", d + "/item-1", wantData("update")},
	{"DELETE", d + "/item-1", wantData("delete")},
	{"POST", d + "/item-1", wantData405},
	{"PATCH", d + "/item-1", wantData405},
	{"POST", d + "/import/", wantData("import")},
	{"POST", d + "/import", wantData("import")},
	{"POST", d + "/%69mport/", wantData("import")},
	{"GET", d + "/import/", wantData405},
	{"PUT", d + "/import/", wantData405},
	{"DELETE", d + "/import/", wantData405},
	{"GET", d + "/import", wantData("get")},
	{"PUT", d + "/import", wantData("update")},
	{"DELETE", d + "/import", wantData("delete")},
	{"GET", "/api/agents/agent_interviewer/data/contacts/item%20one", wantData("get")},
	{"GET", d + "/item-1/extra", wantOK(classOther)},
	{"GET", d + "/item-1/extra/", wantOK(classOther)},
	{"GET", "/api/agents/agent_interviewer/data", wantOK(classOther)},
	{"GET", "/api/agents/agent_interviewer/data/", wantOK(classOther)},
	{"GET", "/api/agents/agent_interviewer/other/contacts/", wantOK(classOther)},
	{"GET", "/api/agents/agent_interviewer/Data/contacts/", wantOK(classOther)},
	{"GET", "/API/agents/agent_interviewer/data/contacts/", wantOK(classOther)},
	// Other.
	{"GET", "/", wantOK(classOther)},
	{"GET", "/docs", wantOK(classOther)},
	{"GET", "/openapi.json", wantOK(classOther)},
	{"GET", "/a2a...", wantOK(classOther)},
	{"GET", "/.../a2a", wantOK(classOther)},
	{"GET", "/api", wantOK(classOther)},
	{"POST", "/a2a+", wantOK(classOther)},

	// 400: encoded slash or backslash.
	{"GET", "/a2a%2Fevents", want400},
	{"GET", "/a2a%2fevents", want400},
	{"POST", "/a2a%5C", want400},
	{"POST", "/a2a%5c", want400},
	{"GET", d + "%2Fitem", want400},
	{"GET", "/api%2Fsupervaizer/x", want400},
	// 400: does not decode.
	{"POST", "/a2a%ZZ", want400},
	{"POST", "/a2a%", want400},
	{"POST", "/a2a%2", want400},
	{"POST", "/a2a%%32", want400},
	// 400: not starting with /.
	{"POST", "a2a", want400},
	{"POST", "", want400},
	{"OPTIONS", "*", want400},
	{"GET", "%2Fa2a", want400},
	// 400: NUL, backslash, ';'.
	{"POST", "/a2a%00", want400},
	{"POST", "/%00/a2a", want400},
	{"POST", "/a2a\x00", want400},
	{"POST", `/a2a\`, want400},
	{"GET", `/x\..\a2a`, want400},
	{"POST", "/a2a;x=1", want400},
	{"POST", "/a2a%3Bx", want400},
	{"POST", "/a2a%3b", want400},
	{"GET", d + ";x/", want400},
	// 400: empty segment.
	{"POST", "//a2a", want400},
	{"POST", "/a2a//", want400},
	{"GET", "/api//supervaizer/x", want400},
	{"GET", "/api/agents//data/contacts/", want400},
	{"GET", d + "//", want400},
	{"GET", "///", want400},
	{"GET", "//", want400}, // "//" is an empty segment too (doc: "an empty segment ("//")")
	// 400: dot segments, plain and percent-encoded.
	{"POST", "/./a2a", want400},
	{"POST", "/a2a/.", want400},
	{"POST", "/a2a/./", want400},
	{"POST", "/a2a/..", want400},
	{"POST", "/x/../a2a", want400},
	{"POST", "/..", want400},
	{"POST", "/.", want400},
	{"POST", "/%2e%2e/a2a", want400},
	{"POST", "/x/%2E%2E/a2a", want400},
	{"POST", "/x/.%2e/a2a", want400},
	{"POST", "/x/%2e./a2a", want400},
	{"POST", "/%2e/a2a", want400},
	{"GET", "/.well-known/health/../../a2a", want400},
	{"GET", "/.well-known/%2e%2e/a2a/events", want400},
	{"GET", d + "/%2e%2e/", want400},
	{"GET", d + "/..", want400},
	{"GET", d + "/./", want400},
}

// TestClassifyRoute walks classifyCases.
func TestClassifyRoute(t *testing.T) {
	for _, c := range classifyCases {
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
		if got := routePolicies[c.class].key.scope(c.method); got != c.want {
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
		{"4097 bytes", metaHeader(&mid, padTo4096+"="), "the limit is 4096"},
		{"4100 bytes", metaHeader(&mid, objOfEncodedLen(4100)), "the limit is 4096"},
		{"huge", metaHeader(&mid, strings.Repeat("A", 1<<20)), "the limit is 4096"},
		{"mission id checked before size", metaHeader(nil, strings.Repeat("A", 5000)), "requires X-Supervaize-Mission-Id"},
		{"not base64", metaHeader(&mid, "!!!!"), "not base64url"},
		{"impossible length", metaHeader(&mid, "e30xx"), "not base64url"},
		{"space inside", metaHeader(&mid, "e3 0"), "not base64url"},
		{"padding in the middle", metaHeader(&mid, "e3=0"), "not base64url"},
		{"array", metaHeader(&mid, enc([]byte(`[]`))), "JSON object"},
		{"string", metaHeader(&mid, enc([]byte(`"{}"`))), "JSON object"},
		{"null", metaHeader(&mid, enc([]byte(`null`))), "JSON object"},
		{"number", metaHeader(&mid, enc([]byte(`1`))), "JSON object"},
		{"truncated object", metaHeader(&mid, enc([]byte(`{"a":1`))), "not base64url-encoded UTF-8 JSON"},
		{"trailing data", metaHeader(&mid, enc([]byte(`{} {}`))), "not base64url-encoded UTF-8 JSON"},
		{"invalid UTF-8", metaHeader(&mid, enc([]byte("{\"a\":\"\xff\"}"))), "not base64url-encoded UTF-8 JSON"},
		{"UTF-8 BOM", metaHeader(&mid, enc([]byte("\xef\xbb\xbf{}"))), "not base64url-encoded UTF-8 JSON"},
		{"NaN", metaHeader(&mid, enc([]byte(`{"a":NaN}`))), "not base64url-encoded UTF-8 JSON"},
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

// TestAppendSplit: appendSplit gives what strings.Split gives.
func TestAppendSplit(t *testing.T) {
	for _, s := range []string{"", "a", "a/b", "/a", "a/", "//", "api/agents/x/data/r/import", "a/b/c/d/e/f/g/h/i/j"} {
		var buf [2]string
		got := appendSplit(buf[:0], s, '/')
		if want := strings.Split(s, "/"); !slices.Equal(got, want) {
			t.Fatalf("appendSplit(%q) = %q, want %q", s, got, want)
		}
	}
}
