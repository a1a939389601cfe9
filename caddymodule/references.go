// The references block's store, as Provision builds it, shared across reloads (the request path's step is
// gate/references.go; docs/workspaces.md, "Workspaces sharing an agent").

package caddymodule

import (
	"fmt"
	"path/filepath"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/internal/redisclient"
	"github.com/supervaize/supervaizer-sidecar/references"
)

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
func provisionReferences(g *gate.Gate, cfg *config.Config, log *zap.Logger) error {
	rc := cfg.References
	if rc == nil {
		return nil
	}
	eff := cfg.EffectiveReferences()
	if eff.Store == "off" {
		return nil
	}
	lim := references.Limits{TTL: rc.TTL.D(), MaxPerWorkspace: rc.MaxPerWorkspace}
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
