// The workspace_auth introspection block's introspector, as Provision
// builds it (the request path's step is
// gate/introspection.go).

package caddymodule

import (
	"errors"
	"fmt"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/introspection"
)

// provisionIntrospection builds the gate's Introspector from
// workspace_auth's introspection block. Errors: introspection outside
// token mode (required on), no url, both bearer and client_id, client_id
// without client_secret, an empty or malformed pattern, a negative bound.
func provisionIntrospection(g *gate.Gate, wa *config.WorkspaceAuth) error {
	ic := wa.Introspection
	if ic == nil {
		return nil
	}
	if g.Mode != gate.ModeToken {
		return errors.New("supervaizer_auth: workspace_auth introspection needs workspace_auth required on")
	}
	cfg := introspection.Config{ // placeholders expanded by build (placeholdersettings.go)
		URL: ic.URL, ClientID: ic.ClientID, ClientSecret: ic.ClientSecret, Bearer: ic.Bearer,
		Timeout: ic.Timeout.D(), CacheTTL: ic.CacheTTL.D(), NegativeCacheTTL: ic.NegativeCacheTTL.D(), CacheSize: ic.CacheSize, Actions: ic.Actions,
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
