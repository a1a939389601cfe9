package caddymodule

import (
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
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
//	        introspection { ... }       (introspection.go, unmarshalIntrospection)
//	    }
//	    local_mode <bool>
//	    max_body <size>
//	    max_body_a2a <size>
//	    max_body_data <size>
//	    body_timeout <duration>
//	    forward_token on|off
//	    verified_headers on|off
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
//	        max_record_bytes <size>
//	    }
//	}
func (s *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "server_id":
			if err := oneArg(d, &s.ServerID); err != nil {
				return err
			}
		case "api_key":
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
		case "agent":
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
		case "workspace_auth":
			if s.WorkspaceAuth == nil {
				s.WorkspaceAuth = &WorkspaceAuth{}
			}
			if err := s.WorkspaceAuth.unmarshal(d); err != nil {
				return err
			}
		case "local_mode":
			b, err := boolArg(d)
			if err != nil {
				return err
			}
			s.LocalMode = &b
		case "max_body", "max_body_a2a", "max_body_data":
			name := d.Val()
			var v string
			if err := oneArg(d, &v); err != nil {
				return err
			}
			size, err := humanize.ParseBytes(v)
			if err != nil || size == 0 || size > 1<<40 {
				return d.Errf("%s: bad size %q", name, v)
			}
			switch name {
			case "max_body":
				s.MaxBody = int64(size)
			case "max_body_a2a":
				s.MaxBodyA2A = int64(size)
			default:
				s.MaxBodyData = int64(size)
			}
		case "body_timeout":
			dur, err := durationArg(d)
			if err != nil {
				return err
			}
			s.BodyTimeout = dur
		case "forward_token":
			b, err := boolArg(d)
			if err != nil {
				return err
			}
			s.ForwardToken = &b
		case "verified_headers":
			b, err := boolArg(d)
			if err != nil {
				return err
			}
			s.VerifiedHeaders = &b
		case "audit_log":
			if err := oneArg(d, &s.AuditLog); err != nil {
				return err
			}
		case "legacy_routes":
			if err := oneArg(d, &s.LegacyRoutes); err != nil {
				return err
			}
		case "other_routes":
			if err := oneArg(d, &s.OtherRoutes); err != nil {
				return err
			}
		case "events_require_workspace_token":
			b, err := boolArg(d)
			if err != nil {
				return err
			}
			s.EventsRequireWorkspaceToken = b
		case "events_fanout":
			b, err := boolArg(d)
			if err != nil {
				return err
			}
			s.EventsFanout = b
		case "upstream":
			if err := oneArg(d, &s.Upstream); err != nil {
				return err
			}
		case "registration":
			rc, err := unmarshalRegistration(d)
			if err != nil {
				return err
			}
			s.Registration = rc
		case "idempotency":
			ic, err := unmarshalIdempotency(d)
			if err != nil {
				return err
			}
			s.Idempotency = ic
		default:
			return d.Errf("unrecognized supervaizer_auth option %q", name)
		}
	}
	return nil
}

func (wa *WorkspaceAuth) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		switch name {
		case "required":
			b, err := boolArg(d)
			if err != nil {
				return err
			}
			wa.Required = &b
		case "issuer":
			if err := oneArg(d, &wa.Issuer); err != nil {
				return err
			}
		case "audience":
			if err := oneArg(d, &wa.Audience); err != nil {
				return err
			}
		case "public_key":
			if err := oneArg(d, &wa.PublicKey); err != nil {
				return err
			}
		case "jwks_url":
			if err := oneArg(d, &wa.JWKSURL); err != nil {
				return err
			}
		case "leeway", "jwks_refresh", "jwks_unknown_kid_interval", "jwks_timeout", "jwks_max_stale", "max_token_lifetime":
			var v string
			if err := oneArg(d, &v); err != nil {
				return err
			}
			dur, err := caddy.ParseDuration(v)
			if secs, serr := strconv.ParseInt(v, 10, 32); name == "leeway" && serr == nil {
				// Plain seconds, as $SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS.
				dur, err = time.Duration(secs)*time.Second, nil
			}
			if err != nil || dur < 0 {
				return d.Errf("%s: bad duration %q", name, v)
			}
			switch name {
			case "leeway":
				wa.Leeway = new(caddy.Duration(dur))
			case "jwks_refresh":
				wa.JWKSRefresh = caddy.Duration(dur)
			case "jwks_timeout":
				wa.JWKSTimeout = caddy.Duration(dur)
			case "jwks_max_stale":
				wa.JWKSMaxStale = caddy.Duration(dur)
			case "max_token_lifetime":
				wa.MaxTokenLifetime = caddy.Duration(dur)
			default:
				wa.JWKSUnknownKIDInterval = caddy.Duration(dur)
			}
		case "cache_size":
			var v string
			if err := oneArg(d, &v); err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return d.Errf("cache_size: bad number %q", v)
			}
			wa.CacheSize = n
		case "introspection":
			ic, err := unmarshalIntrospection(d)
			if err != nil {
				return err
			}
			wa.Introspection = ic
		default:
			return d.Errf("unrecognized workspace_auth option %q", name)
		}
	}
	return nil
}

func oneArg(d *caddyfile.Dispenser, dst *string) error {
	name := d.Val()
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("%s takes exactly one argument", name)
	}
	*dst = args[0]
	return nil
}

func boolArg(d *caddyfile.Dispenser) (bool, error) {
	name := d.Val()
	var v string
	if err := oneArg(d, &v); err != nil {
		return false, err
	}
	switch strings.ToLower(v) {
	case "on", "true", "yes", "1":
		return true, nil
	case "off", "false", "no", "0":
		return false, nil
	}
	return false, d.Errf("%s must be on or off, not %q", name, v)
}

func unmarshalRegistration(d *caddyfile.Dispenser) (*RegistrationConfig, error) {
	rc := &RegistrationConfig{}
	args := d.RemainingArgs()
	switch {
	case len(args) == 1 && (args[0] == "from_upstream" || args[0] == "off"):
		rc.Source = args[0]
	case len(args) == 2 && args[0] == "file":
		rc.Source, rc.File = "file", args[1]
	default:
		return nil, d.Errf("registration takes from_upstream, off, or file <path>")
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch name := d.Val(); name {
		case "refresh":
			dur, err := durationArg(d)
			if err != nil {
				return nil, err
			}
			rc.Refresh = dur
		case "a2a_versions":
			rc.A2AVersions = d.RemainingArgs()
		case "a2ui_versions":
			rc.A2UIVersions = d.RemainingArgs()
		default:
			return nil, d.Errf("unrecognized registration option %q", name)
		}
	}
	return rc, nil
}

func unmarshalIdempotency(d *caddyfile.Dispenser) (*IdempotencyConfig, error) {
	ic := &IdempotencyConfig{}
	if args := d.RemainingArgs(); len(args) == 1 && args[0] == "off" {
		ic.Store = "off"
	} else if len(args) > 0 {
		return nil, d.Errf("idempotency takes no argument but off")
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		var err error
		switch name {
		case "store":
			err = storeArgs(d, ic)
		case "redis_mode":
			err = oneArg(d, &ic.RedisMode)
		case "min_replicas_ack":
			var v string
			if err = oneArg(d, &v); err == nil {
				ic.MinReplicasAck, err = strconv.Atoi(v)
			}
		case "replica_ack_timeout":
			ic.ReplicaAckTimeout, err = durationArg(d)
		case "max_record_bytes":
			var v string
			if err = oneArg(d, &v); err == nil {
				var n uint64
				n, err = humanize.ParseBytes(v)
				ic.MaxRecordBytes = int64(n)
			}
		case "redis_url":
			err = oneArg(d, &ic.RedisURL)
		case "key_prefix":
			err = oneArg(d, &ic.KeyPrefix)
		case "ttl":
			ic.TTL, err = durationArg(d)
		case "lock_ttl":
			ic.LockTTL, err = durationArg(d)
		case "wait_timeout":
			ic.WaitTimeout, err = durationArg(d)
		case "upstream_timeout":
			ic.UpstreamTimeout, err = durationArg(d)
		case "actions":
			ic.Actions = append(ic.Actions, d.RemainingArgs()...)
		case "require_idempotency_key":
			ic.RequireKey, err = boolArg(d)
		case "max_entries":
			var v string
			if err = oneArg(d, &v); err == nil {
				ic.MaxEntries, err = strconv.Atoi(v)
			}
		case "max_entries_per_workspace":
			var v string
			if err = oneArg(d, &v); err == nil {
				ic.MaxEntriesPerWorkspace, err = strconv.Atoi(v)
			}
		case "max_bytes":
			var v string
			if err = oneArg(d, &v); err == nil {
				var n uint64
				n, err = humanize.ParseBytes(v)
				ic.MaxBytes = int64(n)
			}
		default:
			return nil, d.Errf("unrecognized idempotency option %q", name)
		}
		if err != nil {
			return nil, d.Errf("idempotency %s: %w", name, err)
		}
	}
	return ic, nil
}

// storeArgs reads "store memory|redis|off" or "store file <path>".
func storeArgs(d *caddyfile.Dispenser, ic *IdempotencyConfig) error {
	args := d.RemainingArgs()
	switch {
	case len(args) == 2 && args[0] == "file":
		ic.Store, ic.FilePath = "file", args[1]
	case len(args) == 1 && args[0] != "file":
		ic.Store = args[0]
	default:
		return d.Errf("store takes memory, redis, off, or file <path>")
	}
	return nil
}

func durationArg(d *caddyfile.Dispenser) (caddy.Duration, error) {
	name := d.Val()
	var v string
	if err := oneArg(d, &v); err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil || dur <= 0 {
		return 0, d.Errf("%s: bad duration %q", name, v)
	}
	return caddy.Duration(dur), nil
}
