// The targets whose calls are introspected: the covered action names,
// surface ids and resource scopes, as patterns (pattern/), owned here so
// that Client.Covers answers with the same rule the configuration was
// checked with.

package introspection

import (
	"fmt"
	"slices"

	"github.com/supervaize/supervaizer-sidecar/pattern"
)

// defaultActions are the high-risk operations of the workspace-agent-grants
// seed: job.start, resource imports and mutations (on /a2a and on
// DataResource routes, whose target is the same
// resource.<resource>.<operation> scope), dataset exports, artifact access.
var defaultActions = []string{
	"job.start",
	"resource.*.import", "resource.*.create", "resource.*.update", "resource.*.delete",
	"dataset.*.query",
	"artifact.get",
}

// DefaultActions returns the targets covered when Config.Actions is empty
// (a new slice on each call).
func DefaultActions() []string { return slices.Clone(defaultActions) }

// parseActions parses the covered targets of actions (empty:
// DefaultActions). Errors, each starting "introspection": a malformed
// pattern; a pattern with a namespace (a limits target only: the targets
// introspection sees are plain action names, surface ids and scopes).
func parseActions(actions []string) (pattern.Set, error) {
	if len(actions) == 0 {
		actions = defaultActions
	}
	set, err := pattern.ParseSet(actions)
	if err != nil {
		return nil, fmt.Errorf("introspection: %w", err)
	}
	for _, p := range set {
		if p.Namespace() != "" {
			return nil, fmt.Errorf("introspection actions: %q: a namespace is a limits target only; write the action or surface id", p)
		}
	}
	return set, nil
}

// Covers reports whether calls to target (an action name, a surface id,
// or resource.<resource>.<operation>) are introspected: a pattern of
// Config.Actions (or of DefaultActions) matches it.
func (c *Client) Covers(target string) bool { return c.covered.Match(target) }
