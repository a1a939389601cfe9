// The supervaizer_auth Caddyfile directive, read from the one table of
// settings (config.Fields, config/table.go): a line is a setting's Line
// in its block, and its kind (string, on/off, duration, size, count, list,
// block) says how its arguments are read; the few lines with a syntax of
// their own (customLines) have a reader here. An unknown line, a line
// given twice and a 0 the setting does not take (config.Field.ZeroRefusal)
// are refused at the line. Syntax only: ranges and the rules between
// settings are config.Config.Validate's, for a Caddyfile and a JSON config
// alike. docs/directives.md, "Directive reference", shows every line.

package caddymodule

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/limits"
)

// parseCaddyfile sets up the handler from Caddyfile tokens.
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var s Handler
	err := s.UnmarshalCaddyfile(h.Dispenser)
	return &s, err
}

// UnmarshalCaddyfile reads the supervaizer_auth directive and its block.
func (s *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	return readBlock(d, -1, "supervaizer_auth", reflect.ValueOf(&s.Config).Elem())
}

// readBlock reads the block opened at the dispenser's position into blk,
// the struct of the table's block at index at (-1: the handler), named
// block. An unknown line is refused as an "unrecognized <block> option",
// and so is a second line of a setting that does not repeat: it would
// silently replace the first. A nested block's errors are prefixed by its
// name, so that every error names the block, the line and its number.
func readBlock(d *caddyfile.Dispenser, at int, block string, blk reflect.Value) error {
	lines := map[string]int{}
	for i, f := range config.Fields() {
		if f.Parent == at && f.Line != "" {
			lines[f.Line] = i
		}
	}
	seen := map[string]int{} // line -> its first line number
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		i, ok := lines[d.Val()]
		if !ok {
			return d.Errf("unrecognized %s option %q", block, d.Val())
		}
		f := config.Fields()[i]
		err := onceOnly(d, block, f.Repeat, seen)
		if err == nil {
			err = readLine(d, i, f, blk)
		}
		if err != nil {
			if at < 0 {
				return err
			}
			return fmt.Errorf("%s %w", block, err) // err names the line and its number
		}
	}
	return nil
}

// onceOnly refuses the line at the dispenser's position when seen holds
// it already and it does not repeat; else it notes its number in seen.
func onceOnly(d *caddyfile.Dispenser, block string, repeat bool, seen map[string]int) error {
	name := d.Val()
	first, dup := seen[name]
	switch {
	case !dup:
		seen[name] = d.Line()
	case !repeat:
		return d.Errf("%s is given twice in %s (first at line %d): the second would silently replace the first; give it once",
			name, block, first)
	}
	return nil
}

// readLine reads the line of setting f (index i of the table) into its
// field of blk, by its kind or its own reader.
func readLine(d *caddyfile.Dispenser, i int, f config.Field, blk reflect.Value) error {
	if read, ok := customLines[f.Name]; ok {
		return read(d, blk.Addr().Interface())
	}
	v := blk.Field(f.Index)
	switch f.Kind {
	case config.KindBool:
		b, err := boolArg(d)
		v.SetBool(b)
		return err
	case config.KindSwitch:
		b, err := boolArg(d)
		v.Set(reflect.ValueOf(&b))
		return err
	case config.KindDuration, config.KindSize, config.KindCount:
		n, err := numberArg(d, f)
		v.SetInt(n)
		return err
	case config.KindList:
		args := d.RemainingArgs()
		if len(args) == 0 {
			return d.Errf("%s takes one or more values", f.Line)
		}
		v.Set(reflect.AppendSlice(v, reflect.ValueOf(args)))
		return nil
	case config.KindBlock:
		if d.NextArg() {
			return d.ArgErr()
		}
		return readInto(d, i, f, v)
	}
	arg, err := oneArg(d)
	v.SetString(arg)
	return err
}

// readInto reads the block of setting f (index i) into the pointer v,
// made when nil.
func readInto(d *caddyfile.Dispenser, i int, f config.Field, v reflect.Value) error {
	if v.IsNil() {
		v.Set(reflect.New(f.Type.Elem()))
	}
	return readBlock(d, i, f.Line, v.Elem())
}

// customLines are the readers of the lines with a syntax of their own, by
// setting name; each gets a pointer to its block's struct (set by init:
// the block readers among them read blocks of lines).
var customLines map[string]func(d *caddyfile.Dispenser, blk any) error

func init() { customLines = customReaders() }

// customReaders are customLines.
func customReaders() map[string]func(d *caddyfile.Dispenser, blk any) error {
	return map[string]func(d *caddyfile.Dispenser, blk any) error{
		"api_key":               func(d *caddyfile.Dispenser, blk any) error { return readAPIKey(d, blk.(*config.Config)) },
		"agent":                 func(d *caddyfile.Dispenser, blk any) error { return readAgent(d, blk.(*config.Config)) },
		"verified_headers":      func(d *caddyfile.Dispenser, blk any) error { return readVerifiedHeaders(d, blk.(*config.Config)) },
		"workspace_auth leeway": func(d *caddyfile.Dispenser, blk any) error { return readLeeway(d, blk.(*config.WorkspaceAuth)) },
		"registration":          func(d *caddyfile.Dispenser, blk any) error { return readRegistration(d, blk.(*config.Config)) },
		"idempotency": func(d *caddyfile.Dispenser, blk any) error {
			c := blk.(*config.Config)
			return readOffBlock(d, "idempotency", &c.Idempotency, func(ic *config.IdempotencyConfig) { ic.Store = "off" })
		},
		"references": func(d *caddyfile.Dispenser, blk any) error {
			c := blk.(*config.Config)
			return readOffBlock(d, "references", &c.References, func(rc *config.ReferencesConfig) { rc.Store = "off" })
		},
		"idempotency store": func(d *caddyfile.Dispenser, blk any) error {
			ic := blk.(*config.IdempotencyConfig)
			return readStore(d, &ic.Store, &ic.FilePath)
		},
		"references store": func(d *caddyfile.Dispenser, blk any) error {
			rc := blk.(*config.ReferencesConfig)
			return readStore(d, &rc.Store, &rc.FilePath)
		},
		"limits store":       func(d *caddyfile.Dispenser, blk any) error { return readLimitsStore(d, blk.(*config.LimitsConfig)) },
		"limits rate":        func(d *caddyfile.Dispenser, blk any) error { return readRate(d, blk.(*config.LimitsConfig)) },
		"limits concurrency": func(d *caddyfile.Dispenser, blk any) error { return readConcurrency(d, blk.(*config.LimitsConfig)) },
	}
}

// readAPIKey reads "api_key <key> [read|write]" (default write).
func readAPIKey(d *caddyfile.Dispenser, c *config.Config) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.Errf("api_key takes <key> [read|write]")
	}
	k := config.APIKey{Key: args[0], Scope: "write"}
	if len(args) == 2 {
		k.Scope = args[1]
	}
	if k.Scope != "read" && k.Scope != "write" {
		return d.Errf("api_key scope must be read or write, not %q", k.Scope)
	}
	c.APIKeys = append(c.APIKeys, k)
	return nil
}

// readAgent reads "agent <slug> [<studio_agent_id>]"; a slug may appear
// once.
func readAgent(d *caddyfile.Dispenser, c *config.Config) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.Errf("agent takes <slug> [<studio_agent_id>]")
	}
	if c.Agents == nil {
		c.Agents = map[string]string{}
	}
	if _, dup := c.Agents[args[0]]; dup {
		return d.Errf("agent %q is configured twice", args[0])
	}
	c.Agents[args[0]] = strings.Join(args[1:], "")
	return nil
}

// readVerifiedHeaders reads `verified_headers on|off|compact`: compact is
// on, in the one-header form (JSON verified_headers_form).
func readVerifiedHeaders(d *caddyfile.Dispenser, c *config.Config) error {
	v, err := oneArg(d)
	if err != nil {
		return err
	}
	on := true
	if strings.EqualFold(v, config.VerifiedFormCompact) {
		c.VerifiedHeaders, c.VerifiedHeadersForm = &on, config.VerifiedFormCompact
		return nil
	}
	on, ok := parseSwitch(v)
	if !ok {
		return d.Errf("verified_headers must be on, off or compact, not %q", v)
	}
	c.VerifiedHeaders, c.VerifiedHeadersForm = &on, ""
	return nil
}

// readLeeway reads "leeway <seconds>|<duration>": plain seconds as
// $SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS, or a duration; 0 is none.
func readLeeway(d *caddyfile.Dispenser, wa *config.WorkspaceAuth) error {
	v, err := oneArg(d)
	if err != nil {
		return err
	}
	var dur time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		dur = time.Duration(secs) * time.Second
		if secs > math.MaxInt64/int64(time.Second) || secs < math.MinInt64/int64(time.Second) {
			dur = time.Duration(math.MaxInt64) // saturated: Validate refuses it as out of range
			if secs < 0 {
				dur = math.MinInt64
			}
		}
	} else if dur, err = config.ParseDuration(v); err != nil {
		return d.Errf("leeway: bad duration %q (e.g. 30s, 5m, 1h30m)", v)
	}
	wa.Leeway = new(config.Duration(dur))
	return nil
}

// readRegistration reads "registration from_upstream|off|file <path>" and
// its block.
func readRegistration(d *caddyfile.Dispenser, c *config.Config) error {
	rc := &config.RegistrationConfig{}
	args := d.RemainingArgs()
	switch {
	case len(args) == 1 && (args[0] == "from_upstream" || args[0] == "off"):
		rc.Source = args[0]
	case len(args) == 2 && args[0] == "file":
		rc.Source, rc.File = "file", args[1]
	default:
		return d.Errf("registration takes from_upstream, off, or file <path>")
	}
	c.Registration = rc
	return readBlock(d, config.IndexOf("registration"), "registration", reflect.ValueOf(rc).Elem())
}

// readOffBlock reads "<name> [off]" and its block into *dst (off: setOff).
func readOffBlock[T any](d *caddyfile.Dispenser, name string, dst **T, setOff func(*T)) error {
	*dst = new(T)
	if args := d.RemainingArgs(); len(args) == 1 && args[0] == "off" {
		setOff(*dst)
	} else if len(args) > 0 {
		return d.Errf("%s takes no argument but off", name)
	}
	return readBlock(d, config.IndexOf(name), name, reflect.ValueOf(*dst).Elem())
}

// readStore reads "store memory|redis|off" or "store file <path>".
func readStore(d *caddyfile.Dispenser, store, path *string) error {
	args := d.RemainingArgs()
	switch {
	case len(args) == 2 && args[0] == "file":
		*store, *path = "file", args[1]
	case len(args) == 1 && args[0] != "file":
		*store = args[0]
	default:
		return d.Errf("store takes memory, redis, off, or file <path>")
	}
	return nil
}

// readLimitsStore reads limits' "store memory | redis <url>".
func readLimitsStore(d *caddyfile.Dispenser, lc *config.LimitsConfig) error {
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
}

// readRate reads "rate <pattern>... <n>/<unit> [burst <b>]"; the values
// themselves are checked by Validate (limits/config.go).
func readRate(d *caddyfile.Dispenser, lc *config.LimitsConfig) error {
	args := d.RemainingArgs()
	r := config.RateLimit{}
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

// readConcurrency reads "concurrency <pattern>... <n>"; the values
// themselves are checked by Validate (limits/config.go).
func readConcurrency(d *caddyfile.Dispenser, lc *config.LimitsConfig) error {
	args := d.RemainingArgs()
	if len(args) < 2 {
		return d.Errf("concurrency takes <target-pattern>... <n>")
	}
	n, err := strconv.Atoi(args[len(args)-1])
	if err != nil {
		return d.Errf("concurrency: bad number %q (a whole number)", args[len(args)-1])
	}
	lc.Concurrency = append(lc.Concurrency, config.ConcurrencyLimit{Targets: args[:len(args)-1], Max: n})
	return nil
}

// numberArg reads the one argument of a duration (30s, 5m, 1h30m), size
// (a humanized size: 4KiB, 16MB) or count (a whole number) setting. A
// written 0 is refused unless the setting takes it
// (config.Field.ZeroRefusal, the rule of both front doors); a size past
// the largest number is saturated (Validate refuses it as over the bound).
// Syntax only: the range is Validate's.
func numberArg(d *caddyfile.Dispenser, f config.Field) (int64, error) {
	name := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	var n int64
	switch f.Kind {
	case config.KindDuration:
		dur, err := config.ParseDuration(v)
		if err != nil {
			return 0, d.Errf("%s: bad duration %q (e.g. 30s, 5m, 1h30m)", name, v)
		}
		n = int64(dur)
	case config.KindSize:
		size, err := humanize.ParseBytes(v)
		if err != nil {
			return 0, d.Errf("%s: bad size %q (a number of bytes, e.g. 1048576, 16MiB or 4KB)", name, v)
		}
		n = int64(min(size, math.MaxInt64))
	default:
		c, err := strconv.Atoi(v)
		if err != nil {
			return 0, d.Errf("%s: bad number %q (a whole number)", name, v)
		}
		n = int64(c)
	}
	if msg := f.ZeroRefusal(name); n == 0 && msg != "" {
		return 0, d.Err(msg)
	}
	return n, nil
}

// oneArg reads the one argument of the line at the dispenser's position.
func oneArg(d *caddyfile.Dispenser) (string, error) {
	name := d.Val()
	args := d.RemainingArgs()
	if len(args) != 1 {
		return "", d.Errf("%s takes exactly one argument", name)
	}
	return args[0], nil
}

// boolArg reads the one on/off argument of the line.
func boolArg(d *caddyfile.Dispenser) (bool, error) {
	name := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return false, err
	}
	b, ok := parseSwitch(v)
	if !ok {
		return false, d.Errf("%s must be on or off, not %q", name, v)
	}
	return b, nil
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
