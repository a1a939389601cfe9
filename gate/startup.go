// What start-up says about a configuration besides refusing it: the
// refusal of token mode without agents and the warnings about ignored or
// unsafe settings (README, "Start-up refuses" and "Start-up warns").

package gate

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// EnvValue is an environment variable's name and value.
type EnvValue struct{ Name, Value string }

// StartupChecks runs the start-up rules that need the resolved settings
// (called by caddymodule's build once the mode is known: envKey is the
// API key environment variable), records the effective settings in
// g.Settings (Settings), and logs a warning for each
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
//   - a setting that has no effect in the configuration it is in
//     (ineffectiveSettings): a JWKS period without a JWKS URL, a setting of a
//     block that is off;
//   - a server_id of sdkServerIDMinLen characters or fewer: the sidecar works,
//     but a Supervaizer SDK 1.8.0 agent given the same id drops it for a
//     random one, so every token it checks again fails wrong_audience
//     (docs/sdk-wire.md).
func (c *Config) StartupChecks(g *Gate, log *zap.Logger, ra *ResolvedAuth, envKey EnvValue) []error {
	var errs []error
	if g.Mode == ModeToken && len(g.Agents) == 0 {
		errs = append(errs, errors.New("supervaizer_auth: workspace_auth required but no agent configured: "+
			"add `agent <slug> <studio_agent_id>` for each agent served here "+
			"(without it every call fails workspace_authorization_unknown_agent)"))
	}
	if g.Mode == ModeToken {
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
	WarnPlaceholderAgents(g, log) // checkonly.go
	if envKey.Value != "" && len(c.APIKeys) > 0 {
		used := false
		for _, k := range c.APIKeys {
			used = used || k.Key == envKey.Value
		}
		if !used {
			log.Warn("$" + envKey.Name + " is set but ignored: api_key lines are configured and none is that key " +
				"(add `api_key {$" + envKey.Name + "} write` to keep accepting it)")
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
	for _, w := range c.ineffectiveSettings(ra) {
		log.Warn("setting has no effect: " + w)
	}
	for _, w := range c.plainHTTPURLs(ra) {
		log.Warn(w + " is plain http to another host: whoever can alter that traffic can " +
			"substitute keys or answers (use https, or a loopback address)")
	}
	if g.Mode == ModeToken && (c.Idempotency == nil || c.Idempotency.Store == "" || c.Idempotency.Store == "memory") {
		log.Warn("idempotency store memory: records live in this process only, so a job.start retried after a " +
			"restart runs again (use `store file <path>` or `store redis`: docs/idempotency.md)")
	}
	g.Settings = c.Settings(g, ra) // settings.go
	return errs
}

// plainHTTPURLs names the settings whose URL the sidecar fetches over plain
// http from a host that is not loopback: the JWKS (its keys decide every
// signature) and the introspection endpoint (its answer, and the client
// secret sent to it). Loopback and https are quiet.
func (c *Config) plainHTTPURLs(ra *ResolvedAuth) []string {
	var out []string
	check := func(name, raw string) {
		u, err := url.Parse(raw)
		if err != nil || !strings.EqualFold(u.Scheme, "http") {
			return
		}
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			return
		}
		out = append(out, name+" "+redact.URL(raw))
	}
	if ra != nil {
		check("workspace_auth jwks_url", ra.JWKSURL)
	}
	if ic := c.Auth.Introspection; ic != nil {
		check("workspace_auth introspection url", ic.URL)
	}
	return out
}

// ineffectiveSettings names each setting written where it does nothing, and
// why, so that an operator who believes it is in force learns otherwise at
// start-up (`supervaizer check` lists the same lines).
func (c *Config) ineffectiveSettings(ra *ResolvedAuth) []string {
	var out []string
	set := func(name string, on bool, why string) {
		if on {
			out = append(out, name+" "+why)
		}
	}
	noJWKS := ra == nil || ra.JWKSURL == ""
	for _, p := range []struct {
		name string
		v    time.Duration
	}{{"jwks_refresh", c.Auth.JWKSRefresh}, {"jwks_unknown_kid_interval", c.Auth.JWKSUnknownKIDInterval},
		{"jwks_timeout", c.Auth.JWKSTimeout}, {"jwks_max_stale", c.Auth.JWKSMaxStale}} {
		set("workspace_auth "+p.name, noJWKS && p.v != 0, "(no jwks_url: the key is a PEM, or tokens are not verified)")
	}
	if ic := c.Idempotency; ic != nil && ic.Store == "off" {
		const off = "(idempotency is off)"
		set("idempotency file", ic.FilePath != "", off)
		set("idempotency redis_url", ic.RedisURL != "", off)
		set("idempotency redis_mode", ic.RedisMode != "", off)
		set("idempotency key_prefix", ic.KeyPrefix != "", off)
		set("idempotency min_replicas_ack", ic.MinReplicasAck != 0, off)
		set("idempotency replica_ack_timeout", ic.ReplicaAckTimeout != 0, off)
		set("idempotency ttl", ic.TTL != 0, off)
		set("idempotency lock_ttl", ic.LockTTL != 0, off)
		set("idempotency wait_timeout", ic.WaitTimeout != 0, off)
		set("idempotency upstream_timeout", ic.UpstreamTimeout != 0, off)
		set("idempotency max_entries", ic.MaxEntries != 0, off)
		set("idempotency max_entries_per_workspace", ic.MaxEntriesPerWorkspace != 0, off)
		set("idempotency max_bytes", ic.MaxBytes != 0, off)
		set("idempotency max_bytes_per_workspace", ic.MaxBytesPerWorkspace != 0, off)
		set("idempotency max_record_bytes", ic.MaxRecordBytes != 0, off)
		set("idempotency actions", len(ic.Actions) > 0, off)
	}
	set("registration refresh", c.RegistrationSource == "off" && c.RegistrationRefresh != 0, "(registration is off)")
	return out
}

// sdkServerIDMinLen: Supervaizer SDK 1.8.0 uses SUPERVAIZER_SERVER_ID only
// when it is longer than this many characters (docs/sdk-wire.md).
const sdkServerIDMinLen = 5
