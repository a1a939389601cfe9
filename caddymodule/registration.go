// The registration block's contract source, built alone for `supervaizer
// check` (Provision builds and starts it: gate/contracts.go).

package caddymodule

import (
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// RegistrationSource builds, without starting it, the contract source
// Provision would use for h's registration settings (gate.ContractSource,
// gate/contracts.go). `supervaizer check` (caddymodule/cli) refreshes it
// once per agent.
func (h *Handler) RegistrationSource(log *zap.Logger) (s *registration.Source, from string) {
	return gate.ContractSource(&h.Config, log)
}
