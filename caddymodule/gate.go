package caddymodule

import (
	"time"

	pathgate "github.com/supervaize/supervaizer-sidecar/gate"

	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/events"
	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// otherPolicy is what happens to paths outside the known route classes.
type otherPolicy int

const (
	otherDeny   otherPolicy = iota // 404, the agent is never called
	otherAPIKey                    // API key (read for GET/HEAD, write otherwise)
	otherPublic                    // passed through
)

// gate is the provisioned, immutable runtime state of a Handler.
type gate struct {
	log                *zap.Logger
	keys               pathgate.Keys // the transport keys (gate/apikey.go)
	agents             grants.Agents
	serverID           string
	mode               authMode
	verifier           *grants.Verifier // nil unless mode == modeToken
	maxBody            int64            // body bound of the public, events, legacy and other routes
	maxBodyA2A         int64            // of POST /a2a
	maxBodyData        int64            // of the DataResource routes
	bodyTimeout        time.Duration
	forwardToken       bool
	verified           verifiedForm // how the verified context travels (verified_headers)
	legacyAllowed      bool
	otherRoutes        otherPolicy
	eventsRequireToken bool
	auditAllows        bool           // audit_log all
	requests           *events.Memory // request_id → verified workspace, for the SSE filter (shared per serverID)
	events             *events.Hub    // nil unless events_fanout on
	metrics            *metrics
	settings           []Setting // effective settings, for /_sidecar/status (startup.go)

	contracts     *registration.Source // nil when registration is off
	stopContracts func()

	idem           *idempotency.Guard // nil when idempotency is off
	idemStore      *sharedStore       // the guard's store, shared across reloads
	idemActions    map[string]bool
	requireIdemKey bool
	maxRecordBytes int64 // bound of a covered answer kept to be recorded

	intro *introspector // nil unless workspace_auth introspection (introspection.go)

	limits *limitGate // nil without a limits block (limits.go)
}

func (g *gate) modeName() string {
	switch g.mode {
	case modeLocal:
		return "local"
	case modeNotConfigured:
		return "not_configured"
	}
	return "token"
}

// The request headers of the transport key and the workspace token.
const (
	headerAPIKey        = "X-Api-Key"
	headerWorkspaceAuth = "X-Supervaize-Workspace-Authorization"
)
