// The agents' contract source: built from the registration settings of a
// Config (the agent's card from upstream, or a file), started for a gate,
// or built alone for `supervaizer check`.

package gate

import (
	"context"
	"fmt"
	"sort"

	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// ContractSource builds, without starting it, the contract source
// StartContracts would use for c's registration settings (the same choice and
// options, without metrics), logging through log, and names where it reads
// ("upstream <redacted URL>" or "registration file <path>"). It returns
// nil when registration is off or its settings do not hold (Provision
// reports those). The caller closes the source. `supervaizer check`
// (caddymodule/cli) refreshes it once per agent.
func (c *Config) ContractSource(log *zap.Logger) (s *registration.Source, from string) {
	src, _, err := c.RegistrationKind() // config.go
	if err != nil || src == "" {
		return nil, ""
	}
	if log == nil {
		log = zap.NewNop()
	}
	s, err = c.newContractSource(src, contractHooks{Logger: log})
	if err != nil {
		return nil, ""
	}
	if src == "file" {
		return s, "registration file " + c.RegistrationFile
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
// or "file", from gate.Config.RegistrationKind) for the configured agents, not
// started.
func (c *Config) newContractSource(src string, hooks contractHooks) (*registration.Source, error) {
	accepted := registration.AcceptedVersions{A2A: c.A2AVersions, A2UI: c.A2UIVersions}
	log := hooks.Logger.Named("registration")
	if src == "from_upstream" {
		return registration.NewUpstreamSource(registration.UpstreamOptions{
			BaseURL: c.Upstream, Slugs: c.agentSlugs(), RefreshInterval: c.RegistrationRefresh,
			Accepted: accepted, Logger: log, OnChange: hooks.OnChange, OnFetch: hooks.OnFetch,
		})
	}
	return registration.NewFileSource(c.RegistrationFile, c.agentSlugs(), registration.FileOptions{
		RefreshInterval: c.RegistrationRefresh, Accepted: accepted,
		Logger: log, OnChange: hooks.OnChange, OnFetch: hooks.OnFetch,
	})
}

// agentSlugs are the configured agent slugs, sorted.
func (c *Config) agentSlugs() []string {
	slugs := make([]string, 0, len(c.Agents))
	for slug := range c.Agents {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	return slugs
}

// StartContracts validates the registration settings, then builds and
// starts g's contract source (none when off), its fetches and changes
// counted in g.Metrics. Errors: those of RegistrationKind, and a source
// that cannot be built (e.g. a bad slug).
func (c *Config) StartContracts(g *Gate, log *zap.Logger) error {
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
	s, err := c.newContractSource(src, contractHooks{
		Logger: log,
		OnChange: func(slug string, ch registration.Change, oldFP, newFP string) {
			g.Metrics.ContractChange(ch.Kind.String()) // initial on the first load, as /_sidecar/status says
		},
		OnFetch: func(slug string, err error) { g.Metrics.RegistrationFetch(err) },
	})
	if err != nil {
		return fmt.Errorf("supervaizer_auth: %w", err) // registration/'s errors carry their "registration:" prefix
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	g.Contracts, g.StopContracts = s, cancel
	return nil
}
