// The registration block: its JSON configuration (the contract source it
// chooses is built and started by gate.Config, gate/contracts.go).

package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

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
// Provision would use for h's registration settings
// (gate.Config.ContractSource, gate/contracts.go). `supervaizer check`
// (caddymodule/cli) refreshes it once per agent.
func (h *Handler) RegistrationSource(log *zap.Logger) (s *registration.Source, from string) {
	return h.config().ContractSource(log)
}
