// Package registration reads an agent's Supervaizer v2 registration and
// answers "did the agent declare it?" for the sidecar.
//
// The registration is the supervaizer.v2 extension of the agent's A2A Agent
// Card (seed protocol-support, "Supervaizer v2 Agent Card Extension"; seed
// "Supervaizer v2", Registration). This package:
//
//   - parses it (Parse for a bare registration, FromAgentCard for a card)
//     into an open, tolerant model that is strict on the keys it uses and
//     refuses duplicate keys;
//   - derives the effective action and surface sets the SDK derives
//     (Registration.Actions, Registration.Surfaces);
//   - compiles them into an immutable Contract (AllowsAction, AllowsSurface,
//     CheckVersions, Fingerprint, ...);
//   - grades the change between two registrations (Classify: none, harmless,
//     expanding);
//   - keeps the current Contract of each configured agent slug up to date
//     from the agent upstream or a file (Source).
//
// Source.Allow answers "does the contract allow this call?" for an
// authorized call (allow.go): the contract, or a *refusal.Refusal with the SDK's code
// and text.
//
// Errors the request path maps to SDK data.code strings are *refusal.Refusal values
// with Code contract_version_unsupported, agent_contract_unavailable,
// agent_slug_mismatch, action_not_registered, surface_not_registered or
// workspace_binding_missing.
//
// The package knows nothing of Caddy or HTTP handlers; Source uses an
// http.Client to read cards and a *zap.Logger to log.
package registration
