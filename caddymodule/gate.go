package caddymodule

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"time"

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
	keys               []apiKey
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

type apiKey struct {
	sum   [sha256.Size]byte // SHA-256 of the key: compared in constant time
	write bool
	fp    string // fingerprint for logs
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

// Transport key answers (docs/sdk-wire.md, "API key answers").
const (
	detailBadKey        = "Invalid or missing API key"
	detailInsufficient  = "Insufficient scope"
	headerAPIKey        = "X-Api-Key"
	headerWorkspaceAuth = "X-Supervaize-Workspace-Authorization"
)

// Reasons of a transport key refusal, as audit and metric codes.
const (
	keyMissing      = "api_key_missing"            // no X-API-Key, or an empty one
	keyDuplicate    = "api_key_duplicate"          // two or more X-API-Key headers
	keyUnknown      = "api_key_unknown"            // not a configured key
	keyInsufficient = "api_key_insufficient_scope" // a read key where write is needed
)

// checkAPIKey checks the X-API-Key header values against the configured keys
// for scope ("read" or "write"). It returns status 0 when allowed, else 401
// (no key, two or more X-API-Key headers, unknown key) or 403 (read key,
// write needed), with the FastAPI-style detail and the reason (one of the
// key* codes). Keys are compared as SHA-256 digests in constant time, every
// configured key every time. The matching key's fingerprint is returned for
// the audit log.
func (g *gate) checkAPIKey(values []string, scope string) (status int, detail, fp, reason string) {
	switch {
	case len(values) > 1:
		return http.StatusUnauthorized, detailBadKey, "", keyDuplicate
	case len(values) == 0 || values[0] == "":
		return http.StatusUnauthorized, detailBadKey, "", keyMissing
	}
	got := grants.SHA256String(values[0])
	match := -1
	for i, k := range g.keys {
		if subtle.ConstantTimeCompare(got[:], k.sum[:]) == 1 && match < 0 {
			match = i
		}
	}
	if match < 0 {
		return http.StatusUnauthorized, detailBadKey, "", keyUnknown
	}
	if scope == "write" && !g.keys[match].write {
		return http.StatusForbidden, detailInsufficient, g.keys[match].fp, keyInsufficient
	}
	return 0, "", g.keys[match].fp, ""
}
