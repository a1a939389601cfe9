package gate

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// decodeContext decodes a compact verified context the way an agent would.
func decodeContext(t *testing.T, v string) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(v))
	if err := d.Decode(&m); err != nil || d.More() {
		t.Fatalf("not one JSON object: %q (%v)", v, err)
	}
	return m
}

// validRunes is s with each byte that is not valid UTF-8 replaced by U+FFFD
// (as encoding/json's encoder does).
func validRunes(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

func TestVerifiedContextMembers(t *testing.T) {
	c := &grants.Claims{GrantID: "g1", WorkspaceID: "w1", WorkspaceSlug: "acme", AgentID: "A", AgentSlug: "agent_interviewer",
		ServerID: "S", Scopes: []string{"supervaizer/action.invoke", "job.start"}, AgentWorkspaceRef: "r1", JTI: "j1"}
	got := verifiedContext("token", c)
	want := `{"mode":"token","grant_id":"g1","workspace_id":"w1","workspace_slug":"acme","agent_id":"A","agent_slug":"agent_interviewer",` +
		`"server_id":"S","scopes":["supervaizer/action.invoke","job.start"],"agent_workspace_ref":"r1","jti":"j1"}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := verifiedContext("local", nil); got != `{"mode":"local"}` {
		t.Fatalf("local mode: %s", got)
	}
	// Absent optional claims are absent members, as the headers are absent.
	m := decodeContext(t, verifiedContext("token", &grants.Claims{GrantID: "g", Scopes: []string{"s"}}))
	if !reflect.DeepEqual(m, map[string]any{"mode": "token", "grant_id": "g", "scopes": []any{"s"}}) {
		t.Fatalf("members: %v", m)
	}
}

// TestVerifiedContextAnyClaimText: whatever a claim holds (quotes,
// backslashes, control characters, non-ASCII, astral runes, invalid UTF-8),
// the value is a valid ASCII header value that decodes to the claim (each
// byte of invalid UTF-8 as U+FFFD).
func TestVerifiedContextAnyClaimText(t *testing.T) {
	for _, s := range []string{`a"b`, `a\b`, "a\nb\r\x00\x1f\x7f", "é", "Zoë 工作", "😀", "bad\xffutf8", "</script>", "\u2028"} {
		v := verifiedContext("token", &grants.Claims{WorkspaceSlug: s, Scopes: []string{s}})
		if !httpguts.ValidHeaderFieldValue(v) {
			t.Fatalf("%q: not a valid header value: %q", s, v)
		}
		for i := 0; i < len(v); i++ {
			if v[i] >= utf8.RuneSelf || v[i] < 0x20 {
				t.Fatalf("%q: byte %#x in %q", s, v[i], v)
			}
		}
		want := validRunes(s)
		m := decodeContext(t, v)
		if m["workspace_slug"] != want || !reflect.DeepEqual(m["scopes"], []any{want}) {
			t.Fatalf("%q: decoded %v", s, m)
		}
	}
}

func FuzzVerifiedContext(f *testing.F) {
	f.Add("acme", "job.start")
	f.Add("a\"\\\x00é😀\xff", "")
	f.Fuzz(func(t *testing.T, slug, scope string) {
		v := verifiedContext("token", &grants.Claims{WorkspaceSlug: slug, Scopes: []string{scope}})
		if !httpguts.ValidHeaderFieldValue(v) {
			t.Fatalf("not a valid header value: %q", v)
		}
		m := decodeContext(t, v)
		if slug != "" && m["workspace_slug"] != validRunes(slug) {
			t.Fatalf("slug %q decoded as %v", slug, m["workspace_slug"])
		}
	})
}
