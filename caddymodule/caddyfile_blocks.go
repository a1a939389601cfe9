// The Caddyfile's blocks, one option table each, read by one helper
// (readBlock): an unknown option, the nesting and the prefix of an option's
// error are handled there once. Syntax only: ranges and the rules between
// settings are gate.Config.Validate's (gate/config.go), for a Caddyfile and
// a JSON config alike.

package caddymodule

import (
	"fmt"
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/supervaize/supervaizer-sidecar/limits"
)

// blockOptions are the parsers of one block's options, by name. Each reads
// its line (and its own block) at the dispenser's position into the
// block's value, and names the option in its error.
type blockOptions[T any] map[string]func(*T, *caddyfile.Dispenser) error

// readBlock reads the block opened at the dispenser's position into dst
// through opts. An unknown option is refused as an "unrecognized <block>
// option", and so is a second line of an option that takes one value (all
// but repeatableOptions): it would silently replace the first; an option's
// error is prefixed by prefix (the block's path as the directive reference
// writes it, "" at the top level), so that every error names the block,
// the option and its line.
func readBlock[T any](d *caddyfile.Dispenser, block, prefix string, dst *T, opts blockOptions[T]) error {
	seen := map[string]int{} // option -> its first line
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		parse, ok := opts[d.Val()]
		if !ok {
			return d.Errf("unrecognized %s option %q", block, d.Val())
		}
		err := onceOnly(d, block, seen)
		if err == nil {
			err = parse(dst, d)
		}
		if err != nil {
			if prefix == "" {
				return err
			}
			return fmt.Errorf("%s %w", prefix, err) // err names the option and its line
		}
	}
	return nil
}

// onceOnly refuses the option at the dispenser's position when seen holds
// it already and it is not one of block's repeatableOptions; else it notes
// its line in seen.
func onceOnly(d *caddyfile.Dispenser, block string, seen map[string]int) error {
	name := d.Val()
	first, dup := seen[name]
	switch {
	case !dup:
		seen[name] = d.Line()
	case !repeatableOptions[block+" "+name]:
		return d.Errf("%s is given twice in %s (first at line %d): the second would silently replace the first; give it once",
			name, block, first)
	}
	return nil
}

// repeatableOptions are the options, by "<block> <option>", that a block
// may hold more than once, each line adding to the others: the keys, the
// agents (each slug once: unmarshalAgent), the limits rules and the
// covered actions. Every other option is refused the second time
// (readBlock).
var repeatableOptions = map[string]bool{
	"supervaizer_auth api_key": true, "supervaizer_auth agent": true,
	"limits rate": true, "limits concurrency": true,
	"idempotency actions": true, "introspection actions": true,
}

// unmarshalRegistration reads "registration from_upstream|off|file <path>"
// and its block (registrationOptions).
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
	return rc, readBlock(d, "registration", "registration", rc, registrationOptions)
}

// registrationOptions are the parsers of the registration block's options.
var registrationOptions = blockOptions[RegistrationConfig]{
	"refresh":       func(rc *RegistrationConfig, d *caddyfile.Dispenser) error { return durationArg(d, &rc.Refresh) },
	"a2a_versions":  func(rc *RegistrationConfig, d *caddyfile.Dispenser) error { return allArgs(d, &rc.A2AVersions) },
	"a2ui_versions": func(rc *RegistrationConfig, d *caddyfile.Dispenser) error { return allArgs(d, &rc.A2UIVersions) },
}

// unmarshalIdempotency reads "idempotency [off]" and its block
// (idempotencyOptions).
func unmarshalIdempotency(d *caddyfile.Dispenser) (*IdempotencyConfig, error) {
	ic := &IdempotencyConfig{}
	if args := d.RemainingArgs(); len(args) == 1 && args[0] == "off" {
		ic.Store = "off"
	} else if len(args) > 0 {
		return nil, d.Errf("idempotency takes no argument but off")
	}
	return ic, readBlock(d, "idempotency", "idempotency", ic, idempotencyOptions)
}

// idempotencyOptions are the parsers of the idempotency block's options.
var idempotencyOptions = blockOptions[IdempotencyConfig]{
	"store":            storeArgs,
	"redis_url":        func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return oneArg(d, &ic.RedisURL) },
	"redis_mode":       func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return oneArg(d, &ic.RedisMode) },
	"min_replicas_ack": func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return countArg(d, &ic.MinReplicasAck) },
	"replica_ack_timeout": func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error {
		return durationArg(d, &ic.ReplicaAckTimeout)
	},
	"key_prefix":       func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return oneArg(d, &ic.KeyPrefix) },
	"ttl":              func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return durationArg(d, &ic.TTL) },
	"lock_ttl":         func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return durationArg(d, &ic.LockTTL) },
	"wait_timeout":     func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return durationArg(d, &ic.WaitTimeout) },
	"upstream_timeout": func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return durationArg(d, &ic.UpstreamTimeout) },
	"actions": func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error {
		ic.Actions = append(ic.Actions, d.RemainingArgs()...)
		return nil
	},
	"require_idempotency_key": func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return boolArg(d, &ic.RequireKey) },
	"max_entries":             func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return countArg(d, &ic.MaxEntries) },
	"max_entries_per_workspace": func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error {
		return countArg(d, &ic.MaxEntriesPerWorkspace)
	},
	"max_bytes": func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return sizeArg(d, &ic.MaxBytes) },
	"max_bytes_per_workspace": func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error {
		return sizeArg(d, &ic.MaxBytesPerWorkspace)
	},
	"max_record_bytes": func(ic *IdempotencyConfig, d *caddyfile.Dispenser) error { return sizeArg(d, &ic.MaxRecordBytes) },
}

// storeArgs reads "store memory|redis|off" or "store file <path>".
func storeArgs(ic *IdempotencyConfig, d *caddyfile.Dispenser) error {
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
	return ic, readBlock(d, "introspection", "introspection", ic, introspectionOptions)
}

// introspectionOptions are the parsers of the introspection block's options.
var introspectionOptions = blockOptions[IntrospectionConfig]{
	"url":           func(ic *IntrospectionConfig, d *caddyfile.Dispenser) error { return oneArg(d, &ic.URL) },
	"client_id":     func(ic *IntrospectionConfig, d *caddyfile.Dispenser) error { return oneArg(d, &ic.ClientID) },
	"client_secret": func(ic *IntrospectionConfig, d *caddyfile.Dispenser) error { return oneArg(d, &ic.ClientSecret) },
	"bearer":        func(ic *IntrospectionConfig, d *caddyfile.Dispenser) error { return oneArg(d, &ic.Bearer) },
	"timeout":       func(ic *IntrospectionConfig, d *caddyfile.Dispenser) error { return durationArg(d, &ic.Timeout) },
	"cache_ttl":     func(ic *IntrospectionConfig, d *caddyfile.Dispenser) error { return durationArg(d, &ic.CacheTTL) },
	"negative_cache_ttl": func(ic *IntrospectionConfig, d *caddyfile.Dispenser) error {
		return durationArg(d, &ic.NegativeCacheTTL)
	},
	"cache_size": func(ic *IntrospectionConfig, d *caddyfile.Dispenser) error { return countArg(d, &ic.CacheSize) },
	"actions": func(ic *IntrospectionConfig, d *caddyfile.Dispenser) error {
		if ic.Actions = append(ic.Actions, d.RemainingArgs()...); len(ic.Actions) == 0 {
			return d.ArgErr()
		}
		return nil
	},
}

// unmarshalLimits reads the limits block:
//
//	limits {
//	    rate <target-pattern>... <n>/<s|m|h> [burst <b>]
//	    concurrency <target-pattern>... <n>
//	    store memory | redis <url>
//	    redis_mode single|sentinel|cluster
//	    min_replicas_ack <n>
//	    replica_ack_timeout <duration>
//	    key_prefix <prefix>
//	    on_store_error local | deny
//	    max_keys <n>
//	}
func unmarshalLimits(d *caddyfile.Dispenser) (*LimitsConfig, error) {
	lc := &LimitsConfig{}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	return lc, readBlock(d, "limits", "limits", lc, limitsOptions)
}

// limitsOptions are the parsers of the limits block's options.
var limitsOptions = blockOptions[LimitsConfig]{
	"rate":        unmarshalRate,
	"concurrency": unmarshalConcurrency,
	"store": func(lc *LimitsConfig, d *caddyfile.Dispenser) error {
		args := d.RemainingArgs()
		switch {
		case len(args) == 1 && args[0] != "redis":
			lc.Store = args[0]
		case len(args) == 2 && args[0] == "redis":
			lc.Store, lc.RedisURL = args[0], args[1]
		default:
			return d.Errf("store takes memory or redis <url>")
		}
		return nil
	},
	"redis_mode":          func(lc *LimitsConfig, d *caddyfile.Dispenser) error { return oneArg(d, &lc.RedisMode) },
	"min_replicas_ack":    func(lc *LimitsConfig, d *caddyfile.Dispenser) error { return countArg(d, &lc.MinReplicasAck) },
	"replica_ack_timeout": func(lc *LimitsConfig, d *caddyfile.Dispenser) error { return durationArg(d, &lc.ReplicaAckTimeout) },
	"key_prefix":          func(lc *LimitsConfig, d *caddyfile.Dispenser) error { return oneArg(d, &lc.KeyPrefix) },
	"on_store_error":      func(lc *LimitsConfig, d *caddyfile.Dispenser) error { return oneArg(d, &lc.OnStoreError) },
	"max_keys":            func(lc *LimitsConfig, d *caddyfile.Dispenser) error { return countArg(d, &lc.MaxKeys) },
}

// unmarshalRate reads "rate <pattern>... <n>/<unit> [burst <b>]"; the
// values themselves are checked by Validate (gate/config.go).
func unmarshalRate(lc *LimitsConfig, d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	r := RateLimit{}
	if n := len(args); n >= 2 && args[n-2] == "burst" {
		b, err := strconv.Atoi(args[n-1])
		if err != nil || b == 0 || strconv.Itoa(b) != args[n-1] {
			// 0 would read as the default (JSON's absent burst): refused;
			// like n, a plain decimal.
			return d.Errf("rate: burst %q: must be a whole number from 1 to %d", args[n-1], limits.MaxRate)
		}
		r.Burst, args = b, args[:n-2]
	}
	if len(args) < 2 {
		return d.Errf("rate takes <target-pattern>... <n>/<s|m|h> [burst <b>]")
	}
	r.Targets, r.Rate = args[:len(args)-1], args[len(args)-1]
	lc.Rate = append(lc.Rate, r)
	return nil
}

// unmarshalConcurrency reads "concurrency <pattern>... <n>"; the values
// themselves are checked by Validate (gate/config.go).
func unmarshalConcurrency(lc *LimitsConfig, d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) < 2 {
		return d.Errf("concurrency takes <target-pattern>... <n>")
	}
	n, err := strconv.Atoi(args[len(args)-1])
	if err != nil {
		return d.Errf("concurrency: bad number %q (a whole number)", args[len(args)-1])
	}
	lc.Concurrency = append(lc.Concurrency, ConcurrencyLimit{Targets: args[:len(args)-1], Max: n})
	return nil
}
