// The workspace_auth introspection block: its configuration and the
// introspector Provision builds (the request path's step is
// gate/introspection.go).

package caddymodule

import (
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/introspection"
)

// IntrospectionConfig is workspace_auth's introspection block (RFC 7662);
// absent: off. Like every string setting, its fields take placeholders
// known at start-up, such as {env.NAME} (placeholdersettings.go).
type IntrospectionConfig struct {
	// URL is the introspection endpoint (required).
	URL string `json:"url,omitempty"`
	// ClientID authenticates the sidecar with HTTP Basic, with ClientSecret.
	ClientID string `json:"client_id,omitempty"`
	// ClientSecret is the HTTP Basic password of ClientID.
	ClientSecret string `json:"client_secret,omitempty"`
	// Bearer authenticates with Authorization: Bearer instead.
	Bearer string `json:"bearer,omitempty"`
	// Timeout bounds one call (default 2 s).
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// CacheTTL keeps an active answer (default 10 s, never past the token's exp).
	CacheTTL caddy.Duration `json:"cache_ttl,omitempty"`
	// NegativeCacheTTL keeps an inactive answer (default 2 s).
	NegativeCacheTTL caddy.Duration `json:"negative_cache_ttl,omitempty"`
	// CacheSize bounds the answer cache (entries, default 10,000).
	CacheSize int `json:"cache_size,omitempty"`
	// Actions are the covered targets (action names, surface ids or
	// resource scopes); "*" stands for exactly one dot-separated segment.
	// Default: introspection.DefaultActions (introspection/targets.go).
	Actions []string `json:"actions,omitempty"`
}

// provisionIntrospection builds the gate's Introspector from
// workspace_auth's introspection block. Errors: introspection outside
// token mode (required on), no url, both bearer and client_id, client_id
// without client_secret, an empty or malformed pattern, a negative bound.
func (h *Handler) provisionIntrospection(g *gate.Gate, wa *WorkspaceAuth) error {
	ic := wa.Introspection
	if ic == nil {
		return nil
	}
	if g.Mode != gate.ModeToken {
		return errors.New("supervaizer_auth: workspace_auth introspection needs workspace_auth required on")
	}
	cfg := introspection.Config{ // placeholders expanded by build (placeholdersettings.go)
		URL: ic.URL, ClientID: ic.ClientID, ClientSecret: ic.ClientSecret, Bearer: ic.Bearer,
		Timeout: time.Duration(ic.Timeout), CacheTTL: time.Duration(ic.CacheTTL),
		NegativeCacheTTL: time.Duration(ic.NegativeCacheTTL), CacheSize: ic.CacheSize, Actions: ic.Actions,
		Observe: g.Metrics.IntrospectionCall,
	}
	switch {
	case cfg.URL == "":
		return errors.New("supervaizer_auth: workspace_auth introspection: url is required")
	case cfg.Bearer != "" && cfg.ClientID != "":
		return errors.New("supervaizer_auth: workspace_auth introspection: bearer and client_id are both set: choose one")
	case cfg.ClientID != "" && cfg.ClientSecret == "":
		return errors.New("supervaizer_auth: workspace_auth introspection: client_id without client_secret")
	}
	client, err := introspection.New(cfg)
	if err != nil {
		return fmt.Errorf("supervaizer_auth: workspace_auth %w", err)
	}
	g.Intro = gate.NewIntrospector(client)
	return nil
}
