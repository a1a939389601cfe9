// The agents' contracts: the decision's rule that an authorized call is
// one its agent's contract declares (decideContract), and the contract
// source it asks, built from the registration settings of a config.Config
// (the agent's card from upstream, or a file), started for a gate, or
// built alone for `supervaizer check`.

package gate

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// ContractSource builds, without starting it, the contract source
// startContracts would use for c's registration settings (the same choice and
// options, without metrics), logging through log, and names where it reads
// ("upstream <redacted URL>" or "registration file <path>"). It returns
// nil when registration is off or its settings do not hold (Provision
// reports those). The caller closes the source. `supervaizer check`
// (caddymodule/cli) refreshes it once per agent.
func ContractSource(c *config.Config, log *zap.Logger) (s *registration.Source, from string) {
	src, _, err := c.RegistrationKind() // config/validate.go
	if err != nil || src == "" {
		return nil, ""
	}
	if log == nil {
		log = zap.NewNop()
	}
	s, err = newContractSource(c, src, contractHooks{Logger: log})
	if err != nil {
		return nil, ""
	}
	if src == "file" {
		return s, "registration file " + c.RegistrationBlock().File
	}
	return s, "upstream " + redact.URL(c.Upstream)
}

// contractHooks are the observers of a contract source.
type contractHooks struct {
	Logger   *zap.Logger
	OnChange func(slug string, c registration.Change, oldFP, newFP string)
	OnFetch  func(slug string, err error)
}

// newContractSource builds the contract source of kind src ("from_upstream"
// or "file", from config.Config.RegistrationKind) for the configured
// agents, not started.
func newContractSource(c *config.Config, src string, hooks contractHooks) (*registration.Source, error) {
	rc := c.RegistrationBlock()
	accepted := registration.AcceptedVersions{A2A: rc.A2AVersions, A2UI: rc.A2UIVersions}
	log := hooks.Logger.Named("registration")
	if src == "from_upstream" {
		return registration.NewUpstreamSource(registration.UpstreamOptions{
			BaseURL: c.Upstream, Slugs: c.AgentSlugs(), RefreshInterval: rc.Refresh.D(),
			Accepted: accepted, Logger: log, OnChange: hooks.OnChange, OnFetch: hooks.OnFetch,
		})
	}
	return registration.NewFileSource(rc.File, c.AgentSlugs(), registration.FileOptions{
		RefreshInterval: rc.Refresh.D(), Accepted: accepted,
		Logger: log, OnChange: hooks.OnChange, OnFetch: hooks.OnFetch,
	})
}

// startContracts validates the registration settings, then builds and
// starts g's contract source (none when off), its fetches and changes
// counted in g.Metrics. Errors: those of RegistrationKind, and a source
// that cannot be built (e.g. a bad slug).
func (g *Gate) startContracts(c *config.Config, log *zap.Logger) error {
	src, notEnforced, err := c.RegistrationKind()
	if err != nil {
		return err
	}
	if notEnforced {
		log.Warn("registration not enforced: set upstream (the agent's base URL) or registration file <path> to refuse undeclared actions and surfaces")
	}
	if src == "" {
		return nil
	}
	s, err := newContractSource(c, src, contractHooks{
		Logger: log,
		OnChange: func(slug string, ch registration.Change, oldFP, newFP string) {
			g.metrics.ContractChange(ch.Kind.String()) // initial on the first load, as /_sidecar/status says
		},
		OnFetch: func(slug string, err error) { g.metrics.RegistrationFetch(err) },
	})
	if err != nil {
		return fmt.Errorf("supervaizer_auth: %w", err) // registration/'s errors carry their "registration:" prefix
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	g.contracts, g.stopContracts = s, cancel
	return nil
}

// decideContract applies the agent's v2 contract to an authorized call
// (registration/; supervaizer-v2 seed, "Registration"): the card must have
// been read (agent_contract_unavailable) with accepted protocol versions
// (contract_version_unsupported), the action or surface must be declared
// (-32010 / -32011, as the SDK answers an unregistered handler), and an
// agent that requires a workspace binding needs agent_workspace_ref in the
// token (workspace_binding_missing; bootstrap calls create the binding).
func (g *Gate) decideContract(call *jsonrpc.Call, d decision) decision {
	ask := registration.Call{Action: call.IsAction(), ID: call.Target(), Token: d.mode == verifiedToken}
	if ask.Token {
		ask.AgentWorkspaceRef = d.claims.AgentWorkspaceRef
	}
	c, err := g.contracts.Allow(call.AgentSlug, ask)
	if err != nil {
		out := deny(err) // Allow's refusals are the SDK's answers
		out.claims = d.claims
		return out
	}
	d.contract = c
	return d
}
