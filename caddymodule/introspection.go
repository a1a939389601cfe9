package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/introspection"
	"github.com/supervaize/supervaizer-sidecar/pattern"
)

// Refusal codes of introspection (README, "Revocation before expiry"),
// answered as -32030 on /a2a and 403 {"detail"} on DataResource routes, as
// the other token refusals.
const (
	CodeRevoked                  = "workspace_authorization_revoked"
	CodeIntrospectionUnavailable = "workspace_authorization_introspection_unavailable"
)

// DefaultIntrospectedTargets are the high-risk operations of the
// workspace-agent-grants seed: job.start, resource imports and mutations
// (on /a2a and on DataResource routes, whose target is the same
// resource.<resource>.<operation> scope), dataset exports, artifact access.
var DefaultIntrospectedTargets = []string{
	"job.start",
	"resource.*.import", "resource.*.create", "resource.*.update", "resource.*.delete",
	"dataset.*.query",
	"artifact.get",
}

// IntrospectionConfig is workspace_auth's introspection block (RFC 7662);
// absent: off. String fields take Caddy placeholders such as {env.NAME},
// resolved at provision.
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
	// Default: DefaultIntrospectedTargets.
	Actions []string `json:"actions,omitempty"`
}

// Introspector is the provisioned introspection of a gate.
type Introspector struct {
	client   *introspection.Client
	patterns pattern.Set // the covered targets
}

// provisionIntrospection builds the gate's Introspector from
// workspace_auth's introspection block. Errors: introspection outside
// token mode (required on), no url, both bearer and client_id, client_id
// without client_secret, an empty or malformed pattern, a negative bound.
func (h *Handler) provisionIntrospection(g *Gate, wa *WorkspaceAuth) error {
	ic := wa.Introspection
	if ic == nil {
		return nil
	}
	if g.Mode != ModeToken {
		return errors.New("supervaizer_auth: workspace_auth introspection needs workspace_auth required on")
	}
	repl := caddy.NewReplacer()
	cfg := introspection.Config{
		URL: repl.ReplaceAll(ic.URL, ""), ClientID: repl.ReplaceAll(ic.ClientID, ""),
		ClientSecret: repl.ReplaceAll(ic.ClientSecret, ""), Bearer: repl.ReplaceAll(ic.Bearer, ""),
		Timeout: time.Duration(ic.Timeout), CacheTTL: time.Duration(ic.CacheTTL),
		NegativeCacheTTL: time.Duration(ic.NegativeCacheTTL), CacheSize: ic.CacheSize,
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
	actions := ic.Actions
	if len(actions) == 0 {
		actions = DefaultIntrospectedTargets
	}
	patterns, err := pattern.ParseSet(actions)
	if err != nil {
		return fmt.Errorf("supervaizer_auth: workspace_auth introspection: %w", err)
	}
	for _, p := range patterns {
		if p.Namespace() != "" {
			return fmt.Errorf("supervaizer_auth: workspace_auth introspection actions: %q: a namespace is a limits target only; write the action or surface id", p)
		}
	}
	g.Intro = &Introspector{client: client, patterns: patterns}
	return nil
}

// covers reports whether target matches a pattern (pattern/).
func (in *Introspector) covers(target string) bool { return in.patterns.Match(target) }

// introspectDecision is the last rule of a token decision: when d allowed
// a verified token for a covered target, the endpoint must confirm the
// token is still active and agrees with it (grant_id, workspace_id, scope).
// Inactive or disagreeing: CodeRevoked; no usable answer: fail closed with
// CodeIntrospectionUnavailable. Any other d is returned as is, so a token
// the gate refuses anyway is never sent to the endpoint.
func (g *Gate) introspectDecision(ctx context.Context, target string, tokenValues []string, d decision) decision {
	in := g.Intro
	if in == nil || !d.allow || d.mode != verifiedToken || d.claims == nil || !in.covers(target) {
		return d
	}
	c := d.claims
	v, err := in.client.Check(ctx, grants.TokenFromHeader(tokenValues), introspection.Expect{
		GrantID: c.GrantID, WorkspaceID: c.WorkspaceID, Scopes: c.Scopes,
		ExpiresAt: time.Unix(c.ExpiresAt, 0),
	})
	g.Metrics.introspectionCache(v.Source)
	switch {
	case err != nil:
		return decision{code: CodeIntrospectionUnavailable, claims: c, intro: "unavailable", introCache: v.Source,
			msg: "Workspace authorization could not be confirmed"}
	case v.Result != introspection.Active:
		return decision{code: CodeRevoked, claims: c, intro: v.Result.String(), introCache: v.Source,
			msg: "Workspace authorization has been revoked"}
	}
	d.intro, d.introCache = "active", v.Source
	return d
}

// introspectionNotes are readiness notes: the endpoint's last call failed
// (covered calls are refused meanwhile; readiness itself is unchanged, the
// other calls still work).
func (g *Gate) introspectionNotes(lastError bool) []string {
	if g.Intro == nil {
		return nil
	}
	h := g.Intro.client.Health()
	if h.ConsecutiveFailures == 0 {
		return nil
	}
	note := "introspection failing: " + strconv.Itoa(h.ConsecutiveFailures) +
		" consecutive failed call(s) since at least " + h.LastFailure.UTC().Format(time.RFC3339)
	if lastError {
		note += ", last: " + redactURLsIn(h.LastError)
	}
	return []string{note}
}

// introspectionStatus is the operator view of the endpoint (no secret).
func (g *Gate) introspectionStatus() map[string]any {
	h := g.Intro.client.Health()
	st := map[string]any{"consecutive_failures": h.ConsecutiveFailures}
	if !h.LastGood.IsZero() {
		st["last_good"] = h.LastGood.UTC().Format(time.RFC3339)
	}
	if h.LastError != "" {
		st["last_error"] = h.LastError
		st["last_failure"] = h.LastFailure.UTC().Format(time.RFC3339)
	}
	return st
}

// unmarshalIntrospection reads workspace_auth's block:
//
//	introspection {
//	    url <url>
//	    client_id <id>
//	    client_secret <secret>
//	    bearer <token>
//	    timeout <duration>
//	    cache_ttl <duration>
//	    negative_cache_ttl <duration>
//	    cache_size <entries>
//	    actions <pattern>...
//	}
func unmarshalIntrospection(d *caddyfile.Dispenser) (*IntrospectionConfig, error) {
	ic := &IntrospectionConfig{}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		var err error
		switch name {
		case "url":
			err = oneArg(d, &ic.URL)
		case "client_id":
			err = oneArg(d, &ic.ClientID)
		case "client_secret":
			err = oneArg(d, &ic.ClientSecret)
		case "bearer":
			err = oneArg(d, &ic.Bearer)
		case "timeout":
			ic.Timeout, err = durationArg(d)
		case "cache_ttl":
			ic.CacheTTL, err = durationArg(d)
		case "negative_cache_ttl":
			ic.NegativeCacheTTL, err = durationArg(d)
		case "cache_size":
			err = countArg(d, &ic.CacheSize)
		case "actions":
			if ic.Actions = append(ic.Actions, d.RemainingArgs()...); len(ic.Actions) == 0 {
				err = d.ArgErr()
			}
		default:
			return nil, d.Errf("unrecognized introspection option %q", name)
		}
		if err != nil {
			return nil, fmt.Errorf("introspection %w", err) // err names the option and its line
		}
	}
	return ic, nil
}
