// The registration settings: which contract source (the agent's card from
// upstream, a file, or off) Provision builds, and the source itself.

package caddymodule

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// RegistrationConfig chooses where the agent's v2 contract comes from
// (supervaizer-v2 seed, "Registration"; protocol-support seed, "Agent Card
// extension").
type RegistrationConfig struct {
	// Source is "from_upstream" (default when upstream is set), "file" or
	// "off" (default without upstream: the contract is not enforced).
	Source string `json:"source,omitempty"`
	// File is the JSON file read when Source is "file": a registration, an
	// Agent Card, or an object mapping slug → either.
	File string `json:"file,omitempty"`
	// Refresh is the card refresh period (default 60 s).
	Refresh caddy.Duration `json:"refresh,omitempty"`
	// A2AVersions are the accepted A2A protocol versions of a card
	// (default 0.2.6, the version the seeds pin).
	A2AVersions []string `json:"a2a_versions,omitempty"`
	// A2UIVersions are the accepted A2UI versions of a card (default v0.8,
	// the version the seeds pin).
	A2UIVersions []string `json:"a2ui_versions,omitempty"`
}

// registration is the registration block, empty when absent.
func (h *Handler) registration() *RegistrationConfig {
	if h.Registration == nil {
		return &RegistrationConfig{}
	}
	return h.Registration
}

// RegistrationSource builds, without starting it, the contract source
// Provision would use for h's registration settings (the same choice and
// options, without metrics), logging through log, and names where it reads
// ("upstream <redacted URL>" or "registration file <path>"). It returns
// nil when registration is off or its settings do not hold (Provision
// reports those). The caller closes the source. `supervaizer check`
// (caddymodule/cli) refreshes it once per agent.
func (h *Handler) RegistrationSource(log *zap.Logger) (s *registration.Source, from string) {
	src, _, err := h.config().RegistrationKind() // gate/config.go
	if err != nil || src == "" {
		return nil, ""
	}
	if log == nil {
		log = zap.NewNop()
	}
	s, err = h.newContractSource(src, registrationHooks{Logger: log})
	if err != nil {
		return nil, ""
	}
	if src == "file" {
		return s, "registration file " + h.registration().File
	}
	return s, "upstream " + redactURL(h.Upstream)
}

// registrationHooks are the observers of a contract source.
type registrationHooks struct {
	Logger   *zap.Logger
	OnChange func(slug string, c registration.Change, oldFP, newFP string)
	OnFetch  func(slug string, err error)
}

// newContractSource builds the contract source of kind src ("from_upstream"
// or "file", from gate.Config.RegistrationKind) for the configured agents, not
// started.
func (h *Handler) newContractSource(src string, hooks registrationHooks) (*registration.Source, error) {
	rc := h.registration()
	accepted := registration.AcceptedVersions{A2A: rc.A2AVersions, A2UI: rc.A2UIVersions}
	log := hooks.Logger.Named("registration")
	if src == "from_upstream" {
		return registration.NewUpstreamSource(registration.UpstreamOptions{
			BaseURL: h.Upstream, Slugs: h.agentSlugs(), RefreshInterval: time.Duration(rc.Refresh),
			Accepted: accepted, Logger: log, OnChange: hooks.OnChange, OnFetch: hooks.OnFetch,
		})
	}
	return registration.NewFileSource(rc.File, h.agentSlugs(), registration.FileOptions{
		RefreshInterval: time.Duration(rc.Refresh), Accepted: accepted,
		Logger: log, OnChange: hooks.OnChange, OnFetch: hooks.OnFetch,
	})
}

// agentSlugs are the configured agent slugs, sorted.
func (h *Handler) agentSlugs() []string {
	slugs := make([]string, 0, len(h.Agents))
	for slug := range h.Agents {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	return slugs
}

// provisionRegistration validates the settings, then builds and starts the
// contract source (none when off). Errors: those of gate.Config.RegistrationKind, and
// a source that cannot be built (e.g. a bad slug).
func (h *Handler) provisionRegistration(g *gate.Gate, log *zap.Logger) error {
	src, notEnforced, err := h.config().RegistrationKind() // gate/config.go
	if err != nil {
		return err
	}
	if notEnforced {
		log.Warn("registration not enforced: set upstream (the agent's base URL) or registration file <path> to refuse undeclared actions and surfaces")
	}
	if src == "" {
		return nil
	}
	s, err := h.newContractSource(src, registrationHooks{
		Logger: log,
		OnChange: func(slug string, c registration.Change, oldFP, newFP string) {
			g.Metrics.ContractChange(c.Kind.String()) // initial on the first load, as /_sidecar/status says
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
