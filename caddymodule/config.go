// The Handler's JSON fields as a gate.Config (gate/config.go): the one
// mapping from the module's configuration to the plain values that
// gate.Config.Validate bounds and the build reads.

package caddymodule

import (
	"time"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/introspection"
	"github.com/supervaize/supervaizer-sidecar/limits"
)

// config maps h's settings onto a gate.Config, each as written (the
// environment fallback is build's, provision.go).
func (h *Handler) config() *gate.Config {
	c := &gate.Config{
		ServerID: h.ServerID, Agents: h.Agents,
		MaxBody: h.MaxBody, MaxBodyA2A: h.MaxBodyA2A, MaxBodyData: h.MaxBodyData, BodyMemory: h.BodyMemory,
		BodyTimeout: time.Duration(h.BodyTimeout), VerifiedHeadersForm: h.VerifiedHeadersForm,
		LegacyRoutes: h.LegacyRoutes, OtherRoutes: h.OtherRoutes, AuditLog: h.AuditLog,
		ForwardToken: h.ForwardToken, VerifiedHeaders: h.VerifiedHeaders, EventsFanout: h.EventsFanout,
		EventsRequireToken: h.EventsRequireWorkspaceToken,
		Upstream:           h.Upstream, Auth: h.workspaceAuth().config(), Limits: h.Limits.config(),
		References: h.References.config(),
	}
	rc := h.registration()
	c.RegistrationSource, c.RegistrationFile, c.RegistrationRefresh = rc.Source, rc.File, time.Duration(rc.Refresh)
	c.A2AVersions, c.A2UIVersions = rc.A2AVersions, rc.A2UIVersions
	for _, k := range h.APIKeys {
		c.APIKeys = append(c.APIKeys, gate.ConfigKey{Key: k.Key, Scope: k.Scope})
	}
	if h.Idempotency != nil {
		c.Idempotency = h.Idempotency.config()
	}
	return c
}

// config maps workspace_auth's bounded settings.
func (wa *WorkspaceAuth) config() gate.AuthConfig {
	c := gate.AuthConfig{
		JWKSRefresh: time.Duration(wa.JWKSRefresh), JWKSUnknownKIDInterval: time.Duration(wa.JWKSUnknownKIDInterval),
		JWKSTimeout: time.Duration(wa.JWKSTimeout), JWKSMaxStale: time.Duration(wa.JWKSMaxStale),
		MaxTokenLifetime: time.Duration(wa.MaxTokenLifetime), CacheSize: wa.CacheSize,
	}
	if wa.Leeway != nil {
		c.Leeway = new(time.Duration(*wa.Leeway))
	}
	if ic := wa.Introspection; ic != nil {
		c.Introspection = ic.config()
	}
	return c
}

// config maps the introspection block (its placeholders expanded by build:
// placeholdersettings.go): the URL, how the sidecar authenticates (never
// the credential), the covered targets in effect (default
// introspection.DefaultActions).
func (ic *IntrospectionConfig) config() *gate.IntrospectionConfig {
	c := &gate.IntrospectionConfig{Timeout: time.Duration(ic.Timeout), CacheTTL: time.Duration(ic.CacheTTL),
		NegativeCacheTTL: time.Duration(ic.NegativeCacheTTL), CacheSize: ic.CacheSize,
		URL: ic.URL, Auth: "none", Actions: ic.Actions}
	switch {
	case ic.Bearer != "":
		c.Auth = "bearer"
	case ic.ClientID != "":
		c.Auth = "basic"
	}
	if len(c.Actions) == 0 {
		c.Actions = introspection.DefaultActions()
	}
	return c
}

// config maps the idempotency block.
func (ic *IdempotencyConfig) config() *gate.IdempotencyConfig {
	return &gate.IdempotencyConfig{
		Store: ic.Store, FilePath: ic.FilePath, RedisURL: ic.RedisURL, RedisMode: ic.RedisMode, KeyPrefix: ic.KeyPrefix,
		MinReplicasAck: ic.MinReplicasAck, ReplicaAckTimeout: time.Duration(ic.ReplicaAckTimeout),
		TTL: time.Duration(ic.TTL), LockTTL: time.Duration(ic.LockTTL),
		WaitTimeout: time.Duration(ic.WaitTimeout), UpstreamTimeout: time.Duration(ic.UpstreamTimeout),
		MaxEntries: ic.MaxEntries, MaxEntriesPerWorkspace: ic.MaxEntriesPerWorkspace,
		MaxBytes: ic.MaxBytes, MaxBytesPerWorkspace: ic.MaxBytesPerWorkspace, MaxRecordBytes: ic.MaxRecordBytes,
		Actions: ic.Actions,
	}
}

// config maps the limits block (nil when absent).
func (lc *LimitsConfig) config() *limits.Config {
	if lc == nil {
		return nil
	}
	c := &limits.Config{Store: lc.Store, RedisURL: lc.RedisURL, RedisMode: lc.RedisMode,
		MinReplicasAck: lc.MinReplicasAck, ReplicaAckTimeout: time.Duration(lc.ReplicaAckTimeout),
		KeyPrefix: lc.KeyPrefix, OnStoreError: lc.OnStoreError, MaxKeys: lc.MaxKeys}
	for _, r := range lc.Rate {
		c.Rate = append(c.Rate, limits.RateConfig{Targets: r.Targets, Rate: r.Rate, Burst: r.Burst})
	}
	for _, r := range lc.Concurrency {
		c.Concurrency = append(c.Concurrency, limits.ConcurrencyConfig{Targets: r.Targets, Max: r.Max})
	}
	return c
}
