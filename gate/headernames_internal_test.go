package gate

import (
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// TestHeaderConstantsCanonical: every header name the gate indexes the
// header map with directly (or assigns) is in canonical form, the form the
// servers store names in; a name that is not would silently miss the
// header (a token not read, a hop header not removed).
func TestHeaderConstantsCanonical(t *testing.T) {
	names := []string{headerAPIKey, headerWorkspaceAuth, headerConnection, headerUpgrade, headerTrailer,
		headerVerifiedMode, headerVerifiedContext}
	names = append(names, replayHeaders...)
	names = append(names, hopRequestHeaders...)
	for i := range claimFields {
		names = append(names, claimFields[i].header)
	}
	for _, n := range names {
		if c := http.CanonicalHeaderKey(n); c != n {
			t.Errorf("header name %q is not canonical (%q)", n, c)
		}
	}
}

// TestInjectVerifiedNewMap: the verified headers go into a new map that
// replaces r.Header and holds every header of the client's map (the same
// values); the client's map, which a shallow copy of the request made
// before the gate still holds, is left as it was: no verified header is
// added to it.
func TestInjectVerifiedNewMap(t *testing.T) {
	g := &Gate{Verified: VerifiedEach}
	c := &grants.Claims{GrantID: "grant-1", WorkspaceID: "ws-1", WorkspaceSlug: "acme", AgentID: "agent-id",
		AgentSlug: "agent_interviewer", ServerID: "srv", Scopes: []string{"job.start"}, JTI: "jti-1"}
	client := http.Header{"X-Api-Key": {"k"}, "Content-Type": {"application/json"}, "Accept": {"a", "b"}}
	before := maps.Clone(client)
	r := &http.Request{Header: client}
	earlier := *r // a handler before the gate made a shallow copy
	g.injectVerified(r, decision{allow: true, mode: verifiedToken, claims: c})

	if !maps.EqualFunc(earlier.Header, before, slices.Equal) {
		t.Fatalf("the client's map changed: %v, was %v", earlier.Header, before)
	}
	for k, v := range before {
		if got := r.Header[k]; !slices.Equal(got, v) {
			t.Fatalf("%s = %q in the new map, want %q", k, got, v)
		}
	}
	if got := r.Header.Get("X-Supervaize-Verified-Workspace-Id"); got != "ws-1" {
		t.Fatalf("verified workspace %q", got)
	}
	if n := len(r.Header) - len(before); n != 9 { // mode and eight claims (no workspace ref)
		t.Fatalf("%d headers added, want 9: %v", n, r.Header)
	}
}
