// The problems `supervaizer check` reports beyond start-up's.

package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"go.uber.org/zap"
)

// What `supervaizer check` (caddymodule's Handler.CheckProvision) refuses beyond what
// start-up refuses: start-up tolerates these and keeps serving (it retries
// the store, a placeholder id only fails the calls for that agent), check
// reports them as problems so that a config is not called OK with them.

// placeholderAgentIDs are the Studio agent ids our shipped configs write for
// the user to replace (Caddyfile.example, deploy/k8s).
var placeholderAgentIDs = []string{"replace-with-studio-agent-id"}

// checkStoreTimeout bounds check's one ping of the idempotency store.
const checkStoreTimeout = 5 * time.Second

// placeholderAgents lists the slugs (sorted) whose Studio agent id is a
// shipped placeholder.
func placeholderAgents(agents map[string]string) []string {
	var out []string
	for slug, id := range agents {
		if slices.Contains(placeholderAgentIDs, id) {
			out = append(out, slug)
		}
	}
	sort.Strings(out)
	return out
}

// WarnPlaceholderAgents logs, at start-up, the agents still carrying a
// shipped placeholder id: Studio's tokens name the real id, so every token
// call for them fails workspace_authorization_agent_not_registered.
func WarnPlaceholderAgents(g *Gate, log *zap.Logger) {
	if slugs := placeholderAgents(g.Agents); len(slugs) > 0 {
		log.Warn("agent with the shipped placeholder Studio agent id: its token calls fail " +
			"workspace_authorization_agent_not_registered until you set `agent <slug> <studio_agent_id>`: " + strings.Join(slugs, ", "))
	}
}

// CheckOnlyProblems are the problems check adds to start-up's for a built
// gate: an agent with a placeholder id; an idempotency store that does not
// answer a ping (an unreachable Redis: start-up serves and fails covered
// calls closed, retryable, until it answers).
func (g *Gate) CheckOnlyProblems() []error {
	var errs []error
	if slugs := placeholderAgents(g.Agents); len(slugs) > 0 {
		errs = append(errs, fmt.Errorf("supervaizer_auth: agent %s: the Studio agent id is the shipped placeholder %q: "+
			"write the agent's id from Studio", strings.Join(slugs, ", "), placeholderAgentIDs[0]))
	}
	if g.IdemStore != nil {
		ctx, cancel := context.WithTimeout(context.Background(), checkStoreTimeout)
		defer cancel()
		if err := g.IdemStore.Ping(ctx); err != nil {
			errs = append(errs, errors.New("supervaizer_auth: idempotency store does not answer: "+redact.URLsIn(err.Error())))
		}
	}
	if g.Limits != nil && g.Limits.Limiter.State().Shared() {
		ctx, cancel := context.WithTimeout(context.Background(), checkStoreTimeout)
		defer cancel()
		if err := g.Limits.Limiter.State().Ping(ctx); err != nil {
			errs = append(errs, errors.New("supervaizer_auth: limits store does not answer: "+redact.URLsIn(err.Error())))
		}
	}
	return errs
}
