package caddymodule

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2"
	"github.com/dustin/go-humanize"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/introspection"
)

// What start-up says about a configuration besides refusing it: the
// refusal of token mode without agents, the warnings about ignored or
// unsafe settings (README, "Start-up refuses" and "Start-up warns"), the
// effective settings `supervaizer check` prints; URLs through the one
// redaction (internal/redact) wherever a URL is logged or printed.

// resolvedAuth is what Handler.build resolved from the config and the
// environment for workspace authorization (provision.go), handed to
// startupChecks so that the effective settings shown are the ones used.
type resolvedAuth struct {
	local, required bool
	issuer          string
	audience        string // "" when the default supervaizer-server:<server_id> applies
	publicKey       string // PEM path or inline PEM
	jwksURL         string
	leeway          time.Duration // the effective leeway (grants.DefaultLeeway when unset)
	anySet          bool          // some workspace_auth setting is present (config or environment)
}

// Setting is one effective setting (gate.Setting), as `supervaizer check`
// prints it and /_sidecar/status shows it.
type Setting = gate.Setting

// startupChecks runs the start-up rules that need the resolved settings
// (called by Handler.build once the mode is known), records the effective
// settings in h.effective and g.settings, and logs a warning for each
// setting that is ignored or cannot work. It returns the problems that
// refuse start-up, each naming its setting:
//   - token mode (workspace_auth required) with no `agent` line: every call
//     would fail workspace_authorization_unknown_agent. Studio agent ids come
//     from Studio's server registration, never from the agent's card
//     (registration/model.go: the card's agent.id defaults to the slug), so
//     no flow can supply them later.
//
// Warnings (zap Warn, which `supervaizer check` lists):
//   - an agent without a Studio id in token mode (its calls fail
//     workspace_authorization_agent_not_registered; bootstrap calls work);
//   - $SUPERVAIZER_API_KEY set but ignored because api_key lines exist and
//     none of them is that key;
//   - no write-scope API key: every /a2a call and /_sidecar/refresh is 403;
//   - a server_id of sdkServerIDMinLen characters or fewer: the sidecar works,
//     but a Supervaizer SDK 1.8.0 agent given the same id drops it for a
//     random one, so every token it checks again fails wrong_audience
//     (docs/sdk-wire.md).
func (h *Handler) startupChecks(g *gate.Gate, log *zap.Logger, ra resolvedAuth) []error {
	var errs []error
	if g.Mode == gate.ModeToken && len(g.Agents) == 0 {
		errs = append(errs, errors.New("supervaizer_auth: workspace_auth required but no agent configured: "+
			"add `agent <slug> <studio_agent_id>` for each agent served here "+
			"(without it every call fails workspace_authorization_unknown_agent)"))
	}
	if g.Mode == gate.ModeToken {
		var noID []string
		for slug, id := range g.Agents {
			if id == "" {
				noID = append(noID, slug)
			}
		}
		sort.Strings(noID)
		if len(noID) > 0 {
			log.Warn("agent without a Studio agent id: its token calls fail workspace_authorization_agent_not_registered " +
				"until you set `agent <slug> <studio_agent_id>`: " + strings.Join(noID, ", "))
		}
	}
	gate.WarnPlaceholderAgents(g, log) // gate/checkonly.go
	if env := os.Getenv(envAPIKey); env != "" && len(h.APIKeys) > 0 {
		used := false
		for _, k := range h.APIKeys {
			used = used || k.Key == env
		}
		if !used {
			log.Warn("$" + envAPIKey + " is set but ignored: api_key lines are configured and none is that key " +
				"(add `api_key {$" + envAPIKey + "} write` to keep accepting it)")
		}
	}
	if len(g.Keys) > 0 {
		write := false
		for _, k := range g.Keys {
			write = write || k.Write
		}
		if !write {
			log.Warn("no write-scope API key: every /a2a call and POST /_sidecar/refresh will be refused 403 Insufficient scope " +
				"(give one api_key the write scope)")
		}
	}
	if n := utf8.RuneCountInString(g.ServerID); n > 0 && n <= sdkServerIDMinLen {
		log.Warn(fmt.Sprintf("server_id %q has %d characters: a Supervaizer SDK 1.8.0 agent ignores a SUPERVAIZER_SERVER_ID "+
			"of %d characters or fewer and makes up a random id, so the tokens this sidecar accepts and passes on fail "+
			"wrong_audience at the agent; give the sidecar and the agent a server_id of %d characters or more",
			g.ServerID, n, sdkServerIDMinLen, sdkServerIDMinLen+1))
	}
	h.effective = h.effectiveSettings(g, ra)
	g.Settings = h.effective
	return errs
}

// sdkServerIDMinLen: Supervaizer SDK 1.8.0 uses SUPERVAIZER_SERVER_ID only
// when it is longer than this many characters (docs/sdk-wire.md).
const sdkServerIDMinLen = 5

// effectiveSettings lists the settings of g after environment resolution,
// in the order of the README's directive reference. API keys appear as
// fingerprint() and scope, URLs through redactURL, an inline PEM as its
// fingerprint.
func (h *Handler) effectiveSettings(g *gate.Gate, ra resolvedAuth) []gate.Setting {
	wa := h.WorkspaceAuth
	if wa == nil {
		wa = &WorkspaceAuth{}
	}
	var out []gate.Setting
	add := func(name, value, source string) {
		out = append(out, gate.Setting{Name: name, Value: value, Source: source})
	}
	add("mode", g.ModeName(), "resolved")
	add("server_id", orNone(g.ServerID), source(h.ServerID != "", envServerID))
	keySrc := "config"
	if len(h.APIKeys) == 0 {
		keySrc = "$" + envAPIKey
	}
	for _, k := range g.Keys {
		scope := "read"
		if k.Write {
			scope = "write"
		}
		add("api_key", k.FP+" "+scope, keySrc)
	}
	slugs := make([]string, 0, len(g.Agents))
	for slug := range g.Agents {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	for _, slug := range slugs {
		add("agent", strings.TrimSpace(slug+" "+g.Agents[slug]), "config")
	}
	if len(slugs) == 0 {
		add("agent", "(none)", "config")
	}
	add("local_mode", fmt.Sprint(ra.local), source(h.LocalMode != nil, envLocalMode))
	add("workspace_auth required", fmt.Sprint(ra.required), source(wa.Required != nil, envAuthRequired))
	add("workspace_auth issuer", orNone(ra.issuer), source(wa.Issuer != "", envAuthIssuer))
	if ra.audience != "" {
		add("workspace_auth audience", ra.audience, source(wa.Audience != "", envAuthAudience))
	} else {
		add("workspace_auth audience", "supervaizer-server:"+g.ServerID, "default")
	}
	if ra.publicKey != "" {
		v := ra.publicKey
		if strings.Contains(v, "-----BEGIN") || strings.Contains(v, `\n`) {
			v = "inline PEM " + fingerprint(v)
		}
		add("workspace_auth public_key", v, source(wa.PublicKey != "", envAuthPEM))
	}
	if ra.jwksURL != "" {
		add("workspace_auth jwks_url", redactURL(ra.jwksURL), source(wa.JWKSURL != "", envAuthJWKS))
	}
	add("workspace_auth leeway", ra.leeway.String(), source(wa.Leeway != nil, envAuthLeeway))
	add("workspace_auth introspection", introspectionSetting(wa.Introspection), source(wa.Introspection != nil, ""))
	if h.Upstream != "" {
		add("upstream", redactURL(h.Upstream), "config")
	}
	add("registration", h.registrationSetting(), source(h.Registration != nil && h.Registration.Source != "", ""))
	add("idempotency", idempotencySetting(h.Idempotency), source(h.Idempotency != nil && h.Idempotency.Store != "", ""))
	add("events_fanout", fmt.Sprint(h.EventsFanout), source(h.EventsFanout, ""))
	h.addLimitsSettings(g.ServerID, add) // limits.go
	h.addForwardSettings(g, add)
	return out
}

// addForwardSettings lists what shapes a forwarded call: the body bounds
// and the body memory budget this handler asks for,
// the token and verified context forwarded, the audit log.
func (h *Handler) addForwardSettings(g *gate.Gate, add func(name, value, source string)) {
	add("max_body_a2a", humanize.IBytes(uint64(g.MaxBodyA2A)), source(h.MaxBodyA2A != 0 || h.MaxBody != 0, ""))
	add("max_body_data", humanize.IBytes(uint64(g.MaxBodyData)), source(h.MaxBodyData != 0 || h.MaxBody != 0, ""))
	add("max_body", humanize.IBytes(uint64(g.MaxBody)), source(h.MaxBody != 0, ""))
	add("body_memory", humanize.IBytes(uint64(cmp.Or(h.BodyMemory, gate.DefaultBodyMemory))), source(h.BodyMemory != 0, ""))
	add("body_timeout", g.BodyTimeout.String(), source(h.BodyTimeout != 0, ""))
	add("forward_token", onOff(g.ForwardToken), source(h.ForwardToken != nil, ""))
	add("verified_headers", g.Verified.String(), source(h.VerifiedHeaders != nil || h.VerifiedHeadersForm != "", ""))
	audit := "all"
	if !g.AuditAllows {
		audit = "deny"
	}
	add("audit_log", audit, source(h.AuditLog != "", ""))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// registrationSetting is the registration source in words: "from_upstream",
// "file <path>", "off", or "off (no upstream: contract not enforced)".
func (h *Handler) registrationSetting() string {
	src, notEnforced, err := h.registrationKind()
	switch {
	case err != nil && h.Registration != nil:
		return h.Registration.Source + " (invalid)"
	case err != nil:
		return "invalid"
	case notEnforced:
		return "off (no upstream: contract not enforced)"
	case src == "file":
		return "file " + h.Registration.File
	case src == "":
		return "off"
	}
	return src
}

// idempotencySetting is the idempotency store in words, its Redis URL
// redacted: "memory", "file <path>", "redis <mode> <url>" or "off".
func idempotencySetting(ic *IdempotencyConfig) string {
	if ic == nil {
		return "memory"
	}
	switch ic.Store {
	case "", "memory":
		return "memory"
	case "file":
		return "file " + ic.FilePath
	case "redis":
		mode, u := ic.RedisMode, ic.RedisURL
		if mode == "" {
			mode = idempotency.RedisModeSingle
		}
		if u == "" {
			u = idempotency.DefaultRedisURL
		}
		return "redis " + mode + " " + redactURL(u)
	}
	return ic.Store
}

// introspectionSetting is the introspection in words: "off", or its URL
// redacted, how the sidecar authenticates (bearer, basic or none; never the
// credential) and the covered targets.
func introspectionSetting(ic *IntrospectionConfig) string {
	if ic == nil {
		return "off"
	}
	repl := caddy.NewReplacer()
	auth := "none"
	switch {
	case repl.ReplaceAll(ic.Bearer, "") != "":
		auth = "bearer"
	case repl.ReplaceAll(ic.ClientID, "") != "":
		auth = "basic"
	}
	actions := ic.Actions
	if len(actions) == 0 {
		actions = introspection.DefaultActions()
	}
	return redactURL(repl.ReplaceAll(ic.URL, "")) + " auth " + auth + " actions " + strings.Join(actions, ",")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
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

// ---------------------------------------------------------------- URLs

// redactURL is the one printable form of a URL (internal/redact): no
// userinfo, every query value "REDACTED", no fragment. Used by every log
// line, `check` line and /_sidecar/status field that shows a URL.
func redactURL(raw string) string { return redact.URL(raw) }

// redactURLsIn replaces every URL in a message (an error text from an HTTP
// client, a JWKS or Redis library) by its redactURL form.
func redactURLsIn(s string) string { return redact.URLsIn(s) }

// redactErr is err's text with its URLs redacted, as a zap field.
func redactErr(err error) zap.Field {
	if err == nil {
		return zap.Skip()
	}
	return zap.String("error", redactURLsIn(err.Error()))
}

// ---------------------------------------------------------------- Caddy's own settings

// warnCaddyConfig logs, once per provisioned handler, the Caddy settings
// that put the gate at risk (CaddyConfigWarnings), read from the config
// being loaded (adminOf). Provision calls it.
func warnCaddyConfig(ctx caddy.Context, log *zap.Logger) {
	admin, ok := adminOf(ctx)
	if !ok {
		log.Debug("could not read Caddy's admin settings: admin and autosave warnings skipped")
		return
	}
	for _, w := range CaddyConfigWarnings(admin) {
		log.Warn(w)
	}
}

// CaddyConfigWarnings are the warnings about Caddy's global settings for a
// config whose "admin" section is admin (nil: absent, Caddy's defaults):
//   - the admin endpoint enabled on a TCP address (default localhost:2019,
//     or $CADDY_ADMIN): any process sharing the pod's network namespace,
//     the agent included, can reconfigure or stop the gate. A unix socket
//     is not reported (another container reaches it only through a shared
//     volume);
//   - the config autosave (persist_config, on by default): every load writes
//     the config, inline secrets included, to caddy.ConfigAutosavePath
//     (under $HOME or $XDG_CONFIG_HOME).
func CaddyConfigWarnings(admin *caddy.AdminConfig) []string {
	var out []string
	if admin == nil || !admin.Disabled {
		listen := caddy.DefaultAdminListen
		if admin != nil && admin.Listen != "" {
			listen = admin.Listen
		}
		if na, err := caddy.ParseNetworkAddress(listen); err != nil || !na.IsUnixNetwork() {
			out = append(out, "Caddy's admin endpoint is enabled on "+listen+": any process in the pod's network namespace "+
				"(the agent included) can reconfigure or stop the gate; set `admin off` in the global options")
		}
	}
	if admin == nil || admin.Config == nil || admin.Config.Persist == nil || *admin.Config.Persist {
		out = append(out, "Caddy autosaves the loaded config, inline secrets included, to "+caddy.ConfigAutosavePath+
			"; set `persist_config off` in the global options")
	}
	return out
}

// adminOf reads the "admin" section of the config ctx was made for. Caddy
// has no getter for it: caddy.Context keeps the *caddy.Config in its
// unexported cfg field, read here through reflection, read-only (Disabled,
// Listen, Config.Persist; caddy v2.11, context.go and admin.go). By the time
// handlers are provisioned Caddy has filled in the default admin section
// (replaceLocalAdminServer, admin.go). ok is false when the layout is not
// the expected one; TestAdminOf pins it.
func adminOf(ctx caddy.Context) (admin *caddy.AdminConfig, ok bool) {
	defer func() {
		if recover() != nil {
			admin, ok = nil, false
		}
	}()
	cfg := reflect.ValueOf(ctx).FieldByName("cfg")
	if cfg.Kind() != reflect.Pointer || cfg.IsNil() {
		return nil, false
	}
	a := cfg.Elem().FieldByName("Admin")
	if a.Kind() != reflect.Pointer {
		return nil, false
	}
	if a.IsNil() {
		return nil, true
	}
	a = a.Elem()
	out := &caddy.AdminConfig{Disabled: a.FieldByName("Disabled").Bool(), Listen: a.FieldByName("Listen").String()}
	if c := a.FieldByName("Config"); c.Kind() == reflect.Pointer && !c.IsNil() {
		out.Config = &caddy.ConfigSettings{}
		if p := c.Elem().FieldByName("Persist"); p.Kind() == reflect.Pointer && !p.IsNil() {
			persist := p.Elem().Bool()
			out.Config.Persist = &persist
		}
	}
	return out, true
}
