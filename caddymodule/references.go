// The references block: its JSON configuration and the store Provision
// builds, shared across reloads (the request path's step is
// gate/references.go; docs/workspaces.md, "Workspaces sharing an agent").

package caddymodule

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/internal/redisclient"
	"github.com/supervaize/supervaizer-sidecar/references"
)

// ReferencesConfig binds the object references of a shared agent's calls
// to the workspace that first used or created them (docs/workspaces.md).
// Absent: off.
type ReferencesConfig struct {
	// Fields are the action-request fields bound (default job_id case_id
	// step_id draft_session_id request_id).
	Fields []string `json:"fields,omitempty"`
	// DataItems binds DataResource item ids from the create answer and
	// checks them on get, update and delete (default on).
	DataItems *bool `json:"data_items,omitempty"`
	// LearnFromEvents also learns job, case and step ids from the agent's
	// supervaizer.effect events (default on).
	LearnFromEvents *bool `json:"learn_from_events,omitempty"`
	// Unknown is what a reference bound to nobody does: "bind" (default:
	// bound to the caller, first use wins) or "deny" (refused as a foreign
	// one, except what the call creates).
	Unknown string `json:"unknown,omitempty"`
	// Store is "memory", "file", "redis" or "off" (default: the
	// idempotency block's store kind; memory without one).
	Store string `json:"store,omitempty"`
	// FilePath is the file store's database (store file <path>; default,
	// when the idempotency store is file: its path + ".references").
	FilePath string `json:"file_path,omitempty"`
	// RedisURL is the Redis address (default, when the idempotency store
	// is redis: its redis_url); the idempotency block's redis_mode applies.
	RedisURL string `json:"redis_url,omitempty"`
	// TTL: a binding lives this long after its last use (default 720h).
	TTL caddy.Duration `json:"ttl,omitempty"`
	// MaxPerWorkspace bounds one workspace's bindings (default 50,000):
	// past it, its own least recently used go first.
	MaxPerWorkspace int `json:"max_per_workspace,omitempty"`
}

// config maps the references block (nil when absent).
func (rc *ReferencesConfig) config() *gate.ReferencesConfig {
	if rc == nil {
		return nil
	}
	return &gate.ReferencesConfig{Fields: rc.Fields, DataItems: rc.DataItems, LearnFromEvents: rc.LearnFromEvents,
		Unknown: rc.Unknown, Store: rc.Store, FilePath: rc.FilePath, RedisURL: rc.RedisURL,
		TTL: time.Duration(rc.TTL), MaxPerWorkspace: rc.MaxPerWorkspace}
}

// refStorePool holds the references stores by identity: a reload with the
// same store settings keeps every binding (Caddy provisions the new config
// before it cleans up the old one).
var refStorePool = caddy.NewUsagePool()

// pooledRefStore is a references store in refStorePool.
type pooledRefStore struct{ references.Store }

// Destruct closes the store when no gate holds it.
func (p pooledRefStore) Destruct() error { return p.Store.Close() }

// provisionReferences builds the gate's references step over the store of
// its identity (shared across reloads). Validate has run.
func provisionReferences(g *gate.Gate, cfg *gate.Config, log *zap.Logger) error {
	rc := cfg.References
	if rc == nil {
		return nil
	}
	eff := cfg.EffectiveReferences()
	if eff.Store == "off" {
		return nil
	}
	lim := references.Limits{TTL: rc.TTL, MaxPerWorkspace: rc.MaxPerWorkspace}
	prefix := "supervaizer:refs:" + g.ServerID + ":"
	var identity string
	switch eff.Store {
	case "memory":
		identity = "memory|" + g.ServerID
	case "file":
		abs, err := filepath.Abs(eff.FilePath)
		if err != nil {
			return fmt.Errorf("supervaizer_auth: references file_path %q: %w", eff.FilePath, err)
		}
		identity = "file|" + abs
	case "redis":
		identity = "redis|" + eff.RedisMode + "|" + eff.RedisURL + "|" + prefix
	}
	v, _, err := refStorePool.LoadOrNew(identity, func() (caddy.Destructor, error) {
		switch eff.Store {
		case "file":
			s, err := references.NewFileStore(eff.FilePath, lim)
			return pooledRefStore{s}, err
		case "redis":
			// The one place the references store's Redis client is built
			// (internal/redisclient: the construction idempotency and limits use).
			c, _, err := redisclient.New("references", redisclient.Options{URL: eff.RedisURL, Mode: eff.RedisMode})
			if err != nil {
				return nil, err
			}
			return pooledRefStore{references.NewRedisStore(c, prefix, lim)}, nil
		}
		return pooledRefStore{references.NewMemoryStore(lim)}, nil
	})
	if err != nil {
		return fmt.Errorf("supervaizer_auth: references store %s: %w", eff.Store, err)
	}
	st := v.(pooledRefStore).Store
	st.SetLimits(lim)
	fields := map[string]bool{}
	for _, f := range eff.Fields {
		fields[f] = true
	}
	g.Refs = &gate.RefGate{Store: st, StoreName: eff.Store, Fields: fields, DataItems: eff.DataItems,
		LearnEvents: eff.LearnFromEvents, BindUnknown: eff.Unknown == "bind"}
	g.Releases = append(g.Releases, func() { _, _ = refStorePool.Delete(identity) })
	log.Debug("references on", zap.String("store", eff.Store), zap.Strings("fields", eff.Fields))
	return nil
}
