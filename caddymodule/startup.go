package caddymodule

import (
	"reflect"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// What start-up says about a configuration besides refusing it, beyond
// config.Config.StartupChecks (config/startup.go: the refusal of token
// mode without agents, the warnings about ignored or unsafe settings) and
// the effective settings (config/settings.go): the one URL redaction, and
// the warnings about Caddy's own settings.

// ---------------------------------------------------------------- URLs

// redactURLsIn replaces every URL in a message (an error text from an HTTP
// client, a JWKS or Redis library) by its printable form (internal/redact).
func redactURLsIn(s string) string { return redact.URLsIn(s) }

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
