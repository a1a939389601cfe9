// The references block's store, shared across reloads (the step over it is
// gate.New's, gate/new.go; the request path's is gate/references.go;
// docs/workspaces.md, "Workspaces sharing an agent").

package caddymodule

import (
	"fmt"
	"path/filepath"

	"github.com/caddyserver/caddy/v2"

	"github.com/supervaize/supervaizer-sidecar/config"
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

// ReferencesStore is the store of the references in effect e
// (gate.Shared), shared across reloads by identity, its bounds lim
// applied.
func (pools) ReferencesStore(e config.EffectiveReferences, lim references.Limits, serverID string) (references.Store, func(), error) {
	prefix := "supervaizer:refs:" + serverID + ":"
	var identity string
	switch e.Store {
	case "memory":
		identity = "memory|" + serverID
	case "file":
		abs, err := filepath.Abs(e.FilePath)
		if err != nil {
			return nil, nil, fmt.Errorf("supervaizer_auth: references file_path %q: %w", e.FilePath, err)
		}
		identity = "file|" + abs
	case "redis":
		identity = "redis|" + e.RedisMode + "|" + e.RedisURL + "|" + prefix
	}
	v, _, err := refStorePool.LoadOrNew(identity, func() (caddy.Destructor, error) {
		switch e.Store {
		case "file":
			s, err := references.NewFileStore(e.FilePath, lim)
			return pooledRefStore{s}, err
		case "redis":
			// The one place the references store's Redis client is built
			// (internal/redisclient: the construction idempotency and limits use).
			c, _, err := redisclient.New("references", redisclient.Options{URL: e.RedisURL, Mode: e.RedisMode})
			if err != nil {
				return nil, err
			}
			return pooledRefStore{references.NewRedisStore(c, prefix, lim)}, nil
		}
		return pooledRefStore{references.NewMemoryStore(lim)}, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("supervaizer_auth: references store %s: %w", e.Store, err)
	}
	st := v.(pooledRefStore).Store
	st.SetLimits(lim)
	return st, func() { _, _ = refStorePool.Delete(identity) }, nil
}
