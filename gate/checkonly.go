// The problems `supervaizer check` reports beyond start-up's.

package gate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// What `supervaizer check` (caddymodule's Handler.CheckProvision) refuses beyond what
// start-up refuses: start-up tolerates these and keeps serving (it retries
// the store, a placeholder id only fails the calls for that agent), check
// reports them as problems so that a config is not called OK with them.

// checkStoreTimeout bounds check's one ping of the idempotency store.
const checkStoreTimeout = 5 * time.Second

// CheckOnlyProblems are the problems check adds to start-up's for a built
// gate: an agent with a placeholder id; an idempotency store that does not
// answer a ping (an unreachable Redis: start-up serves and fails covered
// calls closed, retryable, until it answers).
func (g *Gate) CheckOnlyProblems() []error {
	var errs []error
	if slugs := config.PlaceholderAgents(g.agents); len(slugs) > 0 {
		errs = append(errs, fmt.Errorf("supervaizer_auth: agent %s: the Studio agent id is the shipped placeholder %q: "+
			"write the agent's id from Studio", strings.Join(slugs, ", "), config.PlaceholderAgentID))
	}
	if g.idemStore != nil {
		ctx, cancel := context.WithTimeout(context.Background(), checkStoreTimeout)
		defer cancel()
		if err := g.idemStore.Ping(ctx); err != nil {
			errs = append(errs, errors.New("supervaizer_auth: idempotency store does not answer: "+redact.URLsIn(err.Error())))
		}
	}
	if g.limits != nil && g.limits.Limiter.State().Shared() {
		ctx, cancel := context.WithTimeout(context.Background(), checkStoreTimeout)
		defer cancel()
		if err := g.limits.Limiter.State().Ping(ctx); err != nil {
			errs = append(errs, errors.New("supervaizer_auth: limits store does not answer: "+redact.URLsIn(err.Error())))
		}
	}
	return errs
}
