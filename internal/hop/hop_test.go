package hop

import (
	"net/http"
	"slices"
	"testing"
)

// TestRemoveFromCopy: every listed header, every header Connection names
// (any case, any spacing, several values), and nothing else is removed;
// Remove keeps the copy-only headers.
func TestRemoveFromCopy(t *testing.T) {
	h := http.Header{}
	for _, name := range slices.Concat(Headers, CopyHeaders) {
		h.Set(name, "x")
	}
	h.Set("Connection", "X-Secret, ,x-other")
	h.Add("Connection", " close")
	h.Set("X-Secret", "s")
	h.Set("X-Other", "o")
	h.Set("Content-Type", "application/json")
	h.Set("X-Agent", "interviewer")

	kept := h.Clone()
	Remove(kept)
	for _, name := range Headers {
		if kept.Get(name) != "" {
			t.Errorf("Remove kept hop-by-hop %s", name)
		}
	}
	if kept.Get("X-Secret") != "" || kept.Get("X-Other") != "" {
		t.Errorf("Remove kept a header Connection names: %v", kept)
	}
	for _, name := range append([]string{"Content-Type", "X-Agent"}, CopyHeaders...) {
		if kept.Get(name) == "" {
			t.Errorf("Remove dropped %s", name)
		}
	}

	RemoveFromCopy(h)
	if len(h) != 2 || h.Get("Content-Type") != "application/json" || h.Get("X-Agent") != "interviewer" {
		t.Errorf("RemoveFromCopy left %v, want Content-Type and X-Agent only", h)
	}
}

// TestListsCanonical: every name is in canonical form (http.Header.Del
// canonicalises, but a reader comparing keys must not be misled) and no
// name is in both lists.
func TestListsCanonical(t *testing.T) {
	for _, name := range slices.Concat(Headers, CopyHeaders) {
		if http.CanonicalHeaderKey(name) != name {
			t.Errorf("%q is not canonical", name)
		}
		if slices.Contains(Headers, name) && slices.Contains(CopyHeaders, name) {
			t.Errorf("%q is in both lists", name)
		}
	}
}
