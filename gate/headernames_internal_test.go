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
