// The environment fallbacks: every setting whose tag names an environment
// variable (config.go) is read from it when the config leaves it out, as
// the Supervaizer SDK reads the same variables, so one env set serves agent
// and sidecar (workspace-agent-grants seed, "Stateless Agent
// Requirement"). Resolve applies them once, with the mode they decide.

package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// Env is the environment variable of the setting named name (Field.Name),
// from the table; "" when it has none.
func Env(name string) string {
	f, _ := FieldNamed(name)
	return f.Env
}

// Resolve resolves, from c and the environment, the transport keys (the
// api_key lines, else the API key variable with write scope), the server
// id (else the audience's), the workspace authorization and the mode
// (token, local, not configured), logging the mode's warnings. Problems:
// no key, an empty key, a bad scope, a bad boolean or leeway in the
// environment, no server_id outside local mode.
func (c *Config) Resolve(log *zap.Logger) (*Resolved, []error) {
	r := &Resolved{}
	errs := c.resolveKeys(r)
	ra, authErrs := c.resolveAuth()
	errs = append(errs, authErrs...)
	r.Auth = ra
	r.ServerID = strSetting(c.ServerID, Env("server_id"))
	if r.ServerID == "" && strings.HasPrefix(ra.Audience, grants.AudiencePrefix) {
		r.ServerID = strings.TrimPrefix(ra.Audience, grants.AudiencePrefix)
	}
	switch {
	case ra.Local && !ra.AnySet:
		r.Mode = ModeLocal
		log.Warn("local mode: /a2a calls are dispatched WITHOUT a workspace token; never expose this sidecar outside a developer machine")
	case ra.Required:
		r.Mode = ModeToken
		if r.ServerID == "" {
			errs = append(errs, ErrNoServerID)
		}
	default:
		r.Mode = ModeNotConfigured
		if r.ServerID == "" && !ra.Local {
			errs = append(errs, ErrNoServerID)
		}
		log.Warn("workspace_auth required is off outside local mode: every non-bootstrap call will fail with workspace_authorization_not_configured")
	}
	return r, errs
}

// ErrNoServerID is the problem of a handler without a server id outside
// local mode.
var ErrNoServerID = fmt.Errorf("supervaizer_auth: no server_id: set server_id or $%s (grants are bound to it)", Env("server_id"))

// resolveKeys resolves the transport keys into r.
func (c *Config) resolveKeys(r *Resolved) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	env := Env("api_key")
	keys := c.APIKeys
	if len(keys) == 0 {
		if k := os.Getenv(env); k != "" {
			keys = []APIKey{{Key: k, Scope: "write"}}
		}
	}
	if len(keys) == 0 {
		bad("no API key configured: set api_key or $%s", env)
	}
	for i, k := range keys {
		if k.Key == "" {
			bad("api_key %d is empty", i+1)
			continue
		}
		var write bool
		switch k.Scope {
		case "", "write":
			write = true
		case "read":
		default:
			bad("api_key %s: scope must be read or write, not %q", redact.Fingerprint(k.Key), k.Scope)
			continue
		}
		r.Keys = append(r.Keys, ResolvedKey{Key: k.Key, FP: redact.Fingerprint(k.Key), Write: write})
	}
	return errs
}

// resolveAuth resolves the workspace authorization settings, each from the
// config, else its environment variable. Problems: a bad boolean in the
// environment (required then counts as on, so that the rest is judged as
// if verification were on), a bad leeway.
func (c *Config) resolveAuth() (*ResolvedAuth, []error) {
	var errs []error
	local, err := boolSetting(c.LocalMode, "local_mode")
	if err != nil {
		errs = append(errs, err)
	}
	wa := c.AuthBlock()
	required, err := boolSetting(wa.Required, "workspace_auth required")
	if err != nil {
		errs = append(errs, err)
		required = boolValue{value: true, set: true}
	}
	ra := &ResolvedAuth{Local: local.value, Required: required.value,
		Issuer:    strSetting(wa.Issuer, Env("workspace_auth issuer")),
		Audience:  strSetting(wa.Audience, Env("workspace_auth audience")),
		PublicKey: strSetting(wa.PublicKey, Env("workspace_auth public_key")),
		JWKSURL:   strSetting(wa.JWKSURL, Env("workspace_auth jwks_url")),
		Sources:   c.authSources()}
	ra.AnySet = required.set || ra.Issuer != "" || ra.Audience != "" || ra.PublicKey != "" || ra.JWKSURL != ""
	if ra.Leeway, err = leewaySetting(wa.Leeway); err != nil {
		errs = append(errs, err)
	}
	return ra, errs
}

// authSources name where each environment-backed setting comes from
// (ResolvedAuth.Sources).
func (c *Config) authSources() map[string]string {
	wa := c.AuthBlock()
	keys := "config"
	if len(c.APIKeys) == 0 {
		keys = "$" + Env("api_key")
	}
	out := map[string]string{"api_key": keys}
	for name, inConfig := range map[string]bool{
		"server_id": c.ServerID != "", "local_mode": c.LocalMode != nil,
		"workspace_auth required": wa.Required != nil, "workspace_auth issuer": wa.Issuer != "",
		"workspace_auth audience": wa.Audience != "", "workspace_auth public_key": wa.PublicKey != "",
		"workspace_auth jwks_url": wa.JWKSURL != "", "workspace_auth leeway": wa.Leeway != nil,
	} {
		out[name] = source(inConfig, Env(name))
	}
	return out
}

// ResolvedJWKSURL is the JWKS URL in effect: workspace_auth jwks_url, else
// its environment variable ("" for none).
func (c *Config) ResolvedJWKSURL() string {
	return strSetting(c.AuthBlock().JWKSURL, Env("workspace_auth jwks_url"))
}

// source names where a setting came from (strSetting's and boolSetting's
// order): the config, else its environment variable, else the default.
func source(inConfig bool, env string) string {
	switch {
	case inConfig:
		return "config"
	case env != "" && strings.TrimSpace(os.Getenv(env)) != "":
		return "$" + env
	}
	return "default"
}

// leewaySetting resolves workspace_auth leeway: the config's (nil: unset),
// else its environment variable, an integer of seconds as the SDK reads it
// (int(...); surrounding spaces allowed), else grants.DefaultLeeway (30 s).
// The SDK's leeway is whole seconds, so a leeway with a fraction of a
// second is refused rather than silently rounded; one outside 0 to
// the table's maximum is refused (the config's by Validate).
func leewaySetting(cfg *Duration) (time.Duration, error) {
	env := Env("workspace_auth leeway")
	if cfg == nil {
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return grants.DefaultLeeway, nil
		}
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("supervaizer_auth: $%s must be a whole number of seconds, not %q", env, v)
		}
		f, _ := FieldNamed("workspace_auth leeway")
		if _, max := f.Bound.Range(); secs < 0 || secs > max/int64(time.Second) {
			return 0, fmt.Errorf("supervaizer_auth: $%s must be between 0 and %d seconds, not %q", env, max/int64(time.Second), v)
		}
		return time.Duration(secs) * time.Second, nil
	}
	// The range is Validate's (bounds.go); the whole-second rule is the
	// SDK's, shared with the environment variable.
	leeway := cfg.D()
	if leeway%time.Second != 0 {
		return 0, fmt.Errorf("supervaizer_auth: workspace_auth leeway must be a whole number of seconds (as the SDK's $%s), not %v", env, leeway)
	}
	return leeway, nil
}

type boolValue struct{ value, set bool }

// boolSetting resolves the boolean setting name from the config, else its
// environment variable (true/false/1/0/yes/no/on/off, case-insensitive).
func boolSetting(cfg *bool, name string) (boolValue, error) {
	if cfg != nil {
		return boolValue{value: *cfg, set: true}, nil
	}
	env := Env(name)
	v := strings.TrimSpace(os.Getenv(env))
	if v == "" {
		return boolValue{}, nil
	}
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return boolValue{value: true, set: true}, nil
	case "0", "false", "no", "off":
		return boolValue{value: false, set: true}, nil
	}
	return boolValue{}, fmt.Errorf("supervaizer_auth: %s: $%s=%q is not a boolean", name, env, v)
}

func strSetting(cfg, env string) string {
	if cfg != "" {
		return cfg
	}
	return strings.TrimSpace(os.Getenv(env))
}
