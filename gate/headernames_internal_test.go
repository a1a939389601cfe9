package gate

import (
	"net/http"
	"testing"
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

// TestVerifiedNameSpellings: every spelling of the verified prefix a server
// may hand on (any case, '_' or '.' for '-') is removed, and no other name.
func TestVerifiedNameSpellings(t *testing.T) {
	h := http.Header{
		"X-Supervaize-Verified-Workspace-Id": {"a"}, "x-supervaize-verified-mode": {"b"},
		"X_Supervaize_Verified_Workspace_Id": {"c"}, "X.Supervaize.Verified.Grant-Id": {"d"},
		"X-SUPERVAIZE_VERIFIED-Scopes": {"e"}, "X-Supervaize-Verified-": {"f"},
		"X-Supervaize-Workspace-Authorization": {"keep"}, "X-Supervaize-Verifie": {"keep"},
		"X-Supervaize-Verifiedx": {"keep"}, "Y-Supervaize-Verified-Mode": {"keep"},
	}
	stripVerified(h)
	if len(h) != 4 {
		t.Fatalf("left %v, want the four keep headers", h)
	}
	for k, v := range h {
		if v[0] != "keep" {
			t.Fatalf("%s was not removed", k)
		}
	}
}
