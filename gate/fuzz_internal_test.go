package gate

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/strictjson/oracle"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// fuzzEscapeAll percent-encodes every byte of a decoded path except '/'.
func fuzzEscapeAll(decoded string) string {
	var b strings.Builder
	for i := 0; i < len(decoded); i++ {
		if decoded[i] == '/' {
			b.WriteByte('/')
			continue
		}
		fmt.Fprintf(&b, "%%%02X", decoded[i])
	}
	return b.String()
}

// FuzzClassifyRoute: classifyRoute never panics, and the class of an
// accepted path is a function of the decoded path the agent's router sees:
// the canonical re-encoding and the fully percent-encoded spelling of the
// decoded path classify the same. Accepted paths have no dot or empty
// segment, NUL, backslash or ';'.
func FuzzClassifyRoute(f *testing.F) {
	for _, s := range []struct{ method, path string }{
		{"POST", "/a2a"}, {"POST", "/%61%32%61"}, {"GET", "/a2a/events"}, {"GET", "/.well-known/agents.json"},
		{"GET", "/.well-known/agents/v1.0/x_agent.json"}, {"GET", "/api/supervaizer/agents/x"},
		{"POST", "/api/agents/a/data/contacts/import/"}, {"DELETE", "/api/agents/a/data/contacts/1"},
		{"GET", "/api/agents/a/data/contacts/%2e%2e/"}, {"GET", "/a2a%2Fevents"}, {"POST", "/a2a;x"},
		{"POST", "//a2a"}, {"GET", "/x/%252F/y"}, {"GET", "/%25%32%46"}, {"PUT", "/api/agents/%C3%A9/data/r%20s/i"},
	} {
		f.Add(s.method, s.path)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		r := classifyRoute(method, path)
		switch r.status {
		case 0, http.StatusMethodNotAllowed:
		case http.StatusBadRequest:
			if r.reason == "" {
				t.Fatal("400 without a reason")
			}
			return
		default:
			t.Fatalf("status %d", r.status)
		}
		decoded, err := url.PathUnescape(path)
		if err != nil {
			t.Fatalf("accepted %q that does not decode: %v", path, err)
		}
		if !strings.HasPrefix(decoded, "/") || strings.ContainsAny(decoded, "\x00\\;") || strings.Contains(decoded, "//") {
			t.Fatalf("accepted %q (decoded %q)", path, decoded)
		}
		for _, seg := range strings.Split(decoded, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("accepted dot segment in %q (decoded %q)", path, decoded)
			}
		}
		if strings.Contains(strings.ToLower(path), "%2f") || strings.Contains(strings.ToLower(path), "%5c") {
			t.Fatalf("accepted encoded slash in %q", path)
		}
		spellings := []string{(&url.URL{Path: decoded}).EscapedPath(), fuzzEscapeAll(decoded)}
		if !strings.Contains(decoded, "%") {
			spellings = append(spellings, decoded) // the decoded path itself is a spelling when it has no '%'
		}
		for _, other := range spellings {
			if r2 := classifyRoute(method, other); r2 != r {
				t.Fatalf("%q -> %+v but %q (same decoded path %q) -> %+v", path, r, other, decoded, r2)
			}
		}
		switch r.class {
		case classData:
			if r.agentSlug == "" || r.resource == "" {
				t.Fatalf("data route without agent or resource: %+v", r)
			}
			if r.status == 0 && !slices.Contains(grants.ResourceOperations, r.operation) {
				t.Fatalf("data route operation %q", r.operation)
			}
		case classController:
			if strings.TrimSuffix(decoded, "/") != "/a2a" || (r.status == 0) != (method == http.MethodPost) {
				t.Fatalf("controller %q %q: %+v", method, decoded, r)
			}
		case classEvents:
			if strings.TrimSuffix(decoded, "/") != "/a2a/events" {
				t.Fatalf("events %q", decoded)
			}
		case classPublic:
			if !strings.HasPrefix(decoded, "/.well-known/") {
				t.Fatalf("public %q", decoded)
			}
		}
	})
}

// metaJSONObject decides independently (strictjson's test oracle, which
// shares no code with the scanner) whether b is exactly one strict JSON
// object nested at most jsonrpc.MaxDepth.
func metaJSONObject(b []byte) bool {
	f := oracle.Read(b)
	return f.IsObject && f.Strict(jsonrpc.MaxDepth)
}

// FuzzMissionMetadata: checkMissionMetadata never panics on arbitrary
// header values, and accepts exactly: header absent; or mission id present
// and not blank, at most 4096 bytes, base64url (padding optional) of a JSON
// object (UTF-8, no duplicate key, bounded depth).
func FuzzMissionMetadata(f *testing.F) {
	enc := base64.RawURLEncoding.EncodeToString
	f.Add("mission_123", enc([]byte(`{"campaign":"c1"}`)), true)
	f.Add("mission_123", base64.URLEncoding.EncodeToString([]byte(`{"a":1}`)), true)
	f.Add("", enc([]byte(`{}`)), true)
	f.Add(" ", enc([]byte(`{}`)), true)
	f.Add("m", enc([]byte(`{"a":1,"\u0061":2}`)), true)
	f.Add("m", enc([]byte(`[]`)), true)
	f.Add("m", "e30===", true)
	f.Add("m", "e30==", true)
	f.Add("m", "e30=", true)
	f.Add("m", "eyJhIjoxfQ=", true)
	f.Add("m", "e30", false)
	f.Add("m", enc([]byte("{\"\xff\":1}")), true)
	f.Add("m", "!!", true)
	f.Fuzz(func(t *testing.T, missionID, metadata string, present bool) {
		h := http.Header{}
		if missionID != "" {
			h.Set(headerMissionID, missionID)
		}
		if present {
			h.Set(headerMissionMetadata, metadata)
		}
		got := checkMissionMetadata(h)

		want := ""
		switch {
		case !present:
		case strings.TrimSpace(missionID) == "":
			want = "mission id"
		case len(metadata) > maxMissionMetadata:
			want = "too large"
		default:
			// The SDK 1.8.0 rule: ^[A-Za-z0-9_-]*={0,2}$, then padded
			// to a multiple of 4 and decoded strictly.
			s := metadata + strings.Repeat("=", (4-len(metadata)%4)%4)
			raw, err := base64.URLEncoding.DecodeString(s)
			switch {
			case !metaAlphabet(metadata) || err != nil:
				want = "base64"
			case !metaJSONObject(raw):
				want = "object"
			}
		}
		if (got == "") != (want == "") {
			t.Fatalf("mission id %q metadata %q present %v: detail %q, want refusal=%v (%s)", missionID, metadata, present, got, want != "", want)
		}
	})
}

// metaAlphabet is the SDK's pattern for the metadata header:
// ^[A-Za-z0-9_-]*={0,2}$.
func metaAlphabet(v string) bool {
	body := strings.TrimRight(v, "=")
	if len(v)-len(body) > 2 {
		return false
	}
	for _, c := range body {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
