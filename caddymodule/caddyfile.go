package caddymodule

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
	"github.com/supervaize/supervaizer-sidecar/gate"
)

// parseCaddyfile sets up the handler from Caddyfile tokens.
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var s Handler
	err := s.UnmarshalCaddyfile(h.Dispenser)
	return &s, err
}

// UnmarshalCaddyfile reads the supervaizer_auth directive:
//
//	supervaizer_auth {
//	    server_id <id>
//	    api_key <key> [read|write]
//	    agent <slug> [<studio_agent_id>]
//	    workspace_auth {
//	        required <bool>
//	        issuer <url>
//	        audience <aud>
//	        public_key <PEM file path or inline PEM>
//	        jwks_url <url>
//	        leeway <seconds>|<duration>
//	        jwks_refresh <duration>
//	        jwks_unknown_kid_interval <duration>
//	        jwks_timeout <duration>
//	        jwks_max_stale <duration>
//	        max_token_lifetime <duration>
//	        cache_size <entries>
//	        introspection { ... }       (caddyfile_blocks.go, unmarshalIntrospection)
//	    }
//	    local_mode <bool>
//	    max_body <size>
//	    max_body_a2a <size>
//	    max_body_data <size>
//	    body_memory <size>
//	    body_timeout <duration>
//	    forward_token on|off
//	    verified_headers on|off|compact
//	    audit_log all|deny
//	    legacy_routes allow|deny
//	    other_routes deny|api_key|public
//	    events_require_workspace_token on|off
//	    events_fanout on|off
//	    upstream <agent base URL>
//	    registration from_upstream|off|file <path> {
//	        refresh <duration>
//	        a2a_versions <v>...
//	        a2ui_versions <v>...
//	    }
//	    idempotency [off] {
//	        store memory|redis|off|file <path>
//	        redis_url <url>
//	        redis_mode single|sentinel|cluster
//	        min_replicas_ack <n>
//	        replica_ack_timeout <duration>
//	        key_prefix <prefix>
//	        ttl <duration>
//	        lock_ttl <duration>
//	        wait_timeout <duration>
//	        upstream_timeout <duration>
//	        actions <action>...
//	        require_idempotency_key on|off
//	        max_entries <n>
//	        max_entries_per_workspace <n>
//	        max_bytes <size>
//	        max_bytes_per_workspace <size>
//	        max_record_bytes <size>
//	    }
//	    limits { ... }                  (caddyfile_blocks.go, unmarshalLimits)
//	}
func (s *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	return readBlock(d, "supervaizer_auth", "", s, handlerOptions)
}

// handlerOptions are the parsers of the supervaizer_auth subdirectives, by
// name. Each reads its line (and block) at the dispenser's position.
var handlerOptions = blockOptions[Handler]{
	"server_id":                      func(s *Handler, d *caddyfile.Dispenser) error { return oneArg(d, &s.ServerID) },
	"api_key":                        (*Handler).unmarshalAPIKey,
	"agent":                          (*Handler).unmarshalAgent,
	"workspace_auth":                 (*Handler).unmarshalWorkspaceAuth,
	"local_mode":                     func(s *Handler, d *caddyfile.Dispenser) error { return boolPtrArg(d, &s.LocalMode) },
	"max_body":                       func(s *Handler, d *caddyfile.Dispenser) error { return sizeArg(d, &s.MaxBody) },
	"max_body_a2a":                   func(s *Handler, d *caddyfile.Dispenser) error { return sizeArg(d, &s.MaxBodyA2A) },
	"max_body_data":                  func(s *Handler, d *caddyfile.Dispenser) error { return sizeArg(d, &s.MaxBodyData) },
	"body_memory":                    func(s *Handler, d *caddyfile.Dispenser) error { return sizeArg(d, &s.BodyMemory) },
	"body_timeout":                   func(s *Handler, d *caddyfile.Dispenser) error { return durationArg(d, &s.BodyTimeout) },
	"forward_token":                  func(s *Handler, d *caddyfile.Dispenser) error { return boolPtrArg(d, &s.ForwardToken) },
	"verified_headers":               unmarshalVerifiedHeaders,
	"audit_log":                      func(s *Handler, d *caddyfile.Dispenser) error { return oneArg(d, &s.AuditLog) },
	"legacy_routes":                  func(s *Handler, d *caddyfile.Dispenser) error { return oneArg(d, &s.LegacyRoutes) },
	"other_routes":                   func(s *Handler, d *caddyfile.Dispenser) error { return oneArg(d, &s.OtherRoutes) },
	"events_require_workspace_token": func(s *Handler, d *caddyfile.Dispenser) error { return boolArg(d, &s.EventsRequireWorkspaceToken) },
	"events_fanout":                  func(s *Handler, d *caddyfile.Dispenser) error { return boolArg(d, &s.EventsFanout) },
	"upstream":                       func(s *Handler, d *caddyfile.Dispenser) error { return oneArg(d, &s.Upstream) },
	"registration": func(s *Handler, d *caddyfile.Dispenser) (err error) {
		s.Registration, err = unmarshalRegistration(d)
		return err
	},
	"idempotency": func(s *Handler, d *caddyfile.Dispenser) (err error) {
		s.Idempotency, err = unmarshalIdempotency(d)
		return err
	},
	"limits": func(s *Handler, d *caddyfile.Dispenser) (err error) {
		s.Limits, err = unmarshalLimits(d)
		return err
	},
}

// unmarshalAPIKey reads "api_key <key> [read|write]" (default write).
func (s *Handler) unmarshalAPIKey(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.Errf("api_key takes <key> [read|write]")
	}
	k := APIKey{Key: args[0], Scope: "write"}
	if len(args) == 2 {
		k.Scope = args[1]
	}
	if k.Scope != "read" && k.Scope != "write" {
		return d.Errf("api_key scope must be read or write, not %q", k.Scope)
	}
	s.APIKeys = append(s.APIKeys, k)
	return nil
}

// unmarshalAgent reads "agent <slug> [<studio_agent_id>]"; a slug may
// appear once.
func (s *Handler) unmarshalAgent(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.Errf("agent takes <slug> [<studio_agent_id>]")
	}
	if s.Agents == nil {
		s.Agents = map[string]string{}
	}
	if _, dup := s.Agents[args[0]]; dup {
		return d.Errf("agent %q is configured twice", args[0])
	}
	id := ""
	if len(args) == 2 {
		id = args[1]
	}
	s.Agents[args[0]] = id
	return nil
}

// unmarshalWorkspaceAuth reads the workspace_auth block (a second one is
// refused, as every single-valued option: readBlock).
func (s *Handler) unmarshalWorkspaceAuth(d *caddyfile.Dispenser) error {
	if s.WorkspaceAuth == nil {
		s.WorkspaceAuth = &WorkspaceAuth{}
	}
	return s.WorkspaceAuth.unmarshal(d)
}

// unmarshal reads the options of a workspace_auth block.
func (wa *WorkspaceAuth) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	return readBlock(d, "workspace_auth", "workspace_auth", wa, workspaceAuthOptions)
}

// workspaceAuthOptions are the parsers of the workspace_auth options, by name.
var workspaceAuthOptions = blockOptions[WorkspaceAuth]{
	"required":   func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return boolPtrArg(d, &wa.Required) },
	"issuer":     func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return oneArg(d, &wa.Issuer) },
	"audience":   func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return oneArg(d, &wa.Audience) },
	"public_key": func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return oneArg(d, &wa.PublicKey) },
	"jwks_url":   func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return oneArg(d, &wa.JWKSURL) },
	"leeway": func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error {
		var dur caddy.Duration
		err := authDurationArg(d, &dur)
		if err == nil {
			wa.Leeway = &dur
		}
		return err
	},
	"jwks_refresh": func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return authDurationArg(d, &wa.JWKSRefresh) },
	"jwks_unknown_kid_interval": func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error {
		return authDurationArg(d, &wa.JWKSUnknownKIDInterval)
	},
	"jwks_timeout":       func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return authDurationArg(d, &wa.JWKSTimeout) },
	"jwks_max_stale":     func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return authDurationArg(d, &wa.JWKSMaxStale) },
	"max_token_lifetime": func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return authDurationArg(d, &wa.MaxTokenLifetime) },
	"cache_size":         func(wa *WorkspaceAuth, d *caddyfile.Dispenser) error { return countArg(d, &wa.CacheSize) },
	"introspection": func(wa *WorkspaceAuth, d *caddyfile.Dispenser) (err error) {
		wa.Introspection, err = unmarshalIntrospection(d) // caddyfile_blocks.go
		return err
	},
}

// authDurationArg reads the one duration argument of a workspace_auth
// option: a Caddy duration (0 refused, zeroRefused, but for leeway, whose 0
// is none); leeway also takes plain seconds, as
// $SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS. Syntax only: the range is
// Validate's (gate/bounds.go).
func authDurationArg(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	name := d.Val()
	var v string
	if err := oneArg(d, &v); err != nil {
		return err
	}
	if secs, err := strconv.ParseInt(v, 10, 64); name == "leeway" && (err == nil || errors.Is(err, strconv.ErrRange)) {
		if secs > math.MaxInt64/int64(time.Second) || secs < math.MinInt64/int64(time.Second) {
			// Saturated: Validate refuses it as out of leeway's range.
			*dst = caddy.Duration(math.MaxInt64 * sign(secs))
			return nil
		}
		*dst = caddy.Duration(time.Duration(secs) * time.Second)
		return nil
	}
	dur, err := caddy.ParseDuration(v)
	switch {
	case err != nil:
		return d.Errf("%s: bad duration %q (e.g. 30s, 5m, 1h30m)", name, v)
	case dur == 0 && name != "leeway":
		return zeroRefused(d, name, "duration")
	}
	*dst = caddy.Duration(dur)
	return nil
}

// zeroRefused is the one answer to a 0 written for a duration, size or
// count (docs/directives.md, "Directive reference"): the JSON form reads 0
// as the setting absent, its default, so a Caddyfile that writes 0 most
// likely means something else (none, no limit) and is refused at its line.
// The two settings whose 0 is a value of their own, leeway (none) and
// min_replicas_ack (no WAIT, the default), take it.
func zeroRefused(d *caddyfile.Dispenser, name, kind string) error {
	return d.Errf("%s: 0 is not a %s it takes: leave the line out for the default", name, kind)
}

// sign is -1 for a negative n, else 1.
func sign(n int64) int64 {
	if n < 0 {
		return -1
	}
	return 1
}

// sizeArg reads the one size argument of a size option (max_body,
// body_memory, idempotency max_bytes...): a humanized size (4KiB, 16MB).
// Syntax only: the range is Validate's (gate/bounds.go). An
// explicit 0 is refused: the option has no such value, its absence is its
// default.
func sizeArg(d *caddyfile.Dispenser, dst *int64) error {
	name := d.Val()
	var v string
	if err := oneArg(d, &v); err != nil {
		return err
	}
	size, err := humanize.ParseBytes(v)
	switch {
	case err != nil:
		return d.Errf("%s: bad size %q (a number of bytes, e.g. 1048576, 16MiB or 4KB)", name, v)
	case size == 0:
		return zeroRefused(d, name, "size")
	case size > math.MaxInt64:
		size = math.MaxInt64 // Validate refuses it as over the bound
	}
	*dst = int64(size)
	return nil
}

// countArg reads the one whole-number argument of a count option
// (cache_size, max_entries...); 0 is the option's default. Syntax only:
// the range is Validate's (gate/bounds.go).
func countArg(d *caddyfile.Dispenser, dst *int) error {
	name := d.Val()
	var v string
	if err := oneArg(d, &v); err != nil {
		return err
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		return d.Errf("%s: bad number %q (a whole number)", name, v)
	case n == 0 && name != "min_replicas_ack":
		return zeroRefused(d, name, "count")
	}
	*dst = n
	return nil
}

// boolPtrArg reads the one on/off argument of an option whose absence
// means its default.
func boolPtrArg(d *caddyfile.Dispenser, dst **bool) error {
	var b bool
	err := boolArg(d, &b)
	if err == nil {
		*dst = &b
	}
	return err
}

// allArgs reads every argument of a list option (a2a_versions...).
func allArgs(d *caddyfile.Dispenser, dst *[]string) error {
	*dst = d.RemainingArgs()
	return nil
}

// oneArg reads the one argument of a string option.
func oneArg(d *caddyfile.Dispenser, dst *string) error {
	name := d.Val()
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("%s takes exactly one argument", name)
	}
	*dst = args[0]
	return nil
}

// unmarshalVerifiedHeaders reads `verified_headers on|off|compact`: compact
// is on, in the one-header form.
func unmarshalVerifiedHeaders(s *Handler, d *caddyfile.Dispenser) error {
	var v string
	if err := oneArg(d, &v); err != nil {
		return err
	}
	on := true
	if strings.EqualFold(v, "compact") {
		s.VerifiedHeaders, s.VerifiedHeadersForm = &on, gate.VerifiedFormCompact
		return nil
	}
	on, ok := parseSwitch(v)
	if !ok {
		return d.Errf("verified_headers must be on, off or compact, not %q", v)
	}
	s.VerifiedHeaders, s.VerifiedHeadersForm = &on, ""
	return nil
}

func boolArg(d *caddyfile.Dispenser, dst *bool) error {
	name := d.Val()
	var v string
	if err := oneArg(d, &v); err != nil {
		return err
	}
	b, ok := parseSwitch(v)
	if !ok {
		return d.Errf("%s must be on or off, not %q", name, v)
	}
	*dst = b
	return nil
}

// parseSwitch reads an on/off word (on, true, yes, 1 / off, false, no, 0;
// any case).
func parseSwitch(v string) (value, ok bool) {
	switch strings.ToLower(v) {
	case "on", "true", "yes", "1":
		return true, true
	case "off", "false", "no", "0":
		return false, true
	}
	return false, false
}

// durationArg reads the one duration argument of a duration option
// (body_timeout, registration refresh, idempotency ttl...). Syntax only:
// the range is Validate's (gate/bounds.go). An explicit 0 is
// refused: the option has no such value, its absence is its default.
func durationArg(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	name := d.Val()
	var v string
	if err := oneArg(d, &v); err != nil {
		return err
	}
	dur, err := caddy.ParseDuration(v)
	switch {
	case err != nil:
		return d.Errf("%s: bad duration %q (e.g. 30s, 5m, 1h30m)", name, v)
	case dur == 0:
		return zeroRefused(d, name, "duration")
	}
	*dst = caddy.Duration(dur)
	return nil
}
