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

// OtherPolicy is what happens to paths outside the known route classes.
type OtherPolicy int

const (
	OtherDeny   OtherPolicy = iota // 404, the agent is never called
	OtherAPIKey                    // API key (read for GET/HEAD, write otherwise)
	OtherPublic                    // passed through
)

// gate is the provisioned, immutable runtime state of a Handler.
type Gate struct {
	Log                *zap.Logger
	Keys               pathgate.Keys // the transport keys (gate/apikey.go)
	Agents             grants.Agents
	ServerID           string
	Mode               Mode
	Verifier           *grants.Verifier // nil unless mode == ModeToken
	MaxBody            int64            // body bound of the public, events, legacy and other routes
	MaxBodyA2A         int64            // of POST /a2a
	MaxBodyData        int64            // of the DataResource routes
	BodyTimeout        time.Duration
	ForwardToken       bool
	Verified           VerifiedForm // how the verified context travels (verified_headers)
	LegacyAllowed      bool
	OtherRoutes        OtherPolicy
	EventsRequireToken bool
	AuditAllows        bool           // audit_log all
	Requests           *events.Memory // request_id → verified workspace, for the SSE filter (shared per serverID)
	Events             *events.Hub    // nil unless events_fanout on
	Metrics            *Metrics
	Settings           []Setting // effective settings, for /_sidecar/status (startup.go)

	Contracts     *registration.Source // nil when registration is off
	StopContracts func()

	Idem           *idempotency.Guard // nil when idempotency is off
	IdemStore      *sharedStore       // the guard's store, shared across reloads
	IdemActions    map[string]bool
	RequireIdemKey bool
	MaxRecordBytes int64 // bound of a covered answer kept to be recorded

	Intro *Introspector // nil unless workspace_auth introspection (introspection.go)

	Limits *LimitGate // nil without a limits block (limits.go)
}

func (g *Gate) ModeName() string {
	switch g.Mode {
	case ModeLocal:
		return "local"
	case ModeNotConfigured:
		return "not_configured"
	}
	return "token"
}

// The request headers of the transport key and the workspace token.
const (
	headerAPIKey        = "X-Api-Key"
	headerWorkspaceAuth = "X-Supervaize-Workspace-Authorization"
)
