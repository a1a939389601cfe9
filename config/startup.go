// What start-up says about a configuration besides refusing it: the
// refusal of token mode without agents and the warnings about ignored or
// unsafe settings (README, "Start-up refuses" and "Start-up warns").

package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/dustin/go-humanize"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// StartupChecks runs the start-up rules that need the resolved settings r
// (called by gate.New once the mode is known, gate/new.go) and logs a
// warning for each setting that is ignored or cannot work. It returns the
// problems that refuse start-up, each naming its setting:
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
//     block that is off (idempotency, registration, references), local_mode
//     beside a workspace_auth setting, a verified_headers form with
//     verified_headers off;
//   - idempotency max_record_bytes above max_bytes_per_workspace
//     (recordOverShare): answers between the two are never recorded;
//   - a server_id of sdkServerIDMinLen characters or fewer: the sidecar works,
//     but a Supervaizer SDK 1.8.0 agent given the same id drops it for a
//     random one, so every token it checks again fails wrong_audience
//     (docs/sdk-wire.md).
func (c *Config) StartupChecks(r *Resolved, log *zap.Logger) []error {
	var errs []error
	if r.Mode == ModeToken && len(c.Agents) == 0 {
		errs = append(errs, errors.New("supervaizer_auth: workspace_auth required but no agent configured: "+
			"add `agent <slug> <studio_agent_id>` for each agent served here "+
			"(without it every call fails workspace_authorization_unknown_agent)"))
	}
	if r.Mode == ModeToken {
		var noID []string
		for slug, id := range c.Agents {
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
	if slugs := PlaceholderAgents(c.Agents); len(slugs) > 0 {
		log.Warn("agent with the shipped placeholder Studio agent id: its token calls fail " +
			"workspace_authorization_agent_not_registered until you set `agent <slug> <studio_agent_id>`: " + strings.Join(slugs, ", "))
	}
	if env := Env("api_key"); os.Getenv(env) != "" && len(c.APIKeys) > 0 {
		used := false
		for _, k := range c.APIKeys {
			used = used || k.Key == os.Getenv(env)
		}
		if !used {
			log.Warn("$" + env + " is set but ignored: api_key lines are configured and none is that key " +
				"(add `api_key {$" + env + "} write` to keep accepting it)")
		}
	}
	if len(r.Keys) > 0 {
		write := false
		for _, k := range r.Keys {
			write = write || k.Write
		}
		if !write {
			log.Warn("no write-scope API key: every /a2a call and POST /_sidecar/refresh will be refused 403 Insufficient scope " +
				"(give one api_key the write scope)")
		}
	}
	if n := utf8.RuneCountInString(r.ServerID); n > 0 && n <= sdkServerIDMinLen {
		log.Warn(fmt.Sprintf("server_id %q has %d characters: a Supervaizer SDK 1.8.0 agent ignores a SUPERVAIZER_SERVER_ID "+
			"of %d characters or fewer and makes up a random id, so the tokens this sidecar accepts and passes on fail "+
			"wrong_audience at the agent; give the sidecar and the agent a server_id of %d characters or more",
			r.ServerID, n, sdkServerIDMinLen, sdkServerIDMinLen+1))
	}
	for _, w := range c.ineffectiveSettings(r.Auth) {
		log.Warn("setting has no effect: " + w)
	}
	for _, w := range c.plainHTTPURLs(r.Auth) {
		log.Warn(w + " is plain http to another host: whoever can alter that traffic can " +
			"substitute keys or answers (use https, or a loopback address)")
	}
	if w := c.recordOverShare(); w != "" {
		log.Warn(w)
	}
	if r.Mode == ModeToken && (c.Idempotency == nil || c.Idempotency.Store == "" || c.Idempotency.Store == "memory") {
		log.Warn("idempotency store memory: records live in this process only, so a job.start retried after a " +
			"restart runs again (use `store file <path>` or `store redis`: docs/idempotency.md)")
	}
	return errs
}

// recordOverShare is the warning, when the idempotency block is on, that
// max_record_bytes is above a workspace's share of the recorded bytes
// (max_bytes_per_workspace, default max_bytes/8): an answer between the two
// sizes is kept in memory to be recorded, then cannot be (it would take its
// workspace past its share, even alone), so it is passed on once and its
// key stays in flight until lock_ttl (docs/idempotency.md, "A workspace's
// share"). "" when the two agree.
func (c *Config) recordOverShare() string {
	ic := c.Idempotency
	if ic == nil || ic.Store == "off" {
		return ""
	}
	record := orDefault(ic.MaxRecordBytes, DefaultMaxRecordBytes)
	share := ic.MemoryLimits().Resolved().MaxBytesPerGroup
	if record <= share {
		return ""
	}
	how := func(v int64, given bool) string {
		s := humanize.IBytes(uint64(v))
		if !given {
			s += ", the default"
		}
		return s
	}
	return fmt.Sprintf("idempotency max_record_bytes (%s) is above max_bytes_per_workspace (%s): an answer between the "+
		"two sizes is never recorded (passed on once, its key in flight until lock_ttl, so a retry gets "+
		"idempotency_in_progress); lower max_record_bytes or raise max_bytes_per_workspace (or max_bytes)",
		how(record, ic.MaxRecordBytes != 0), how(share, ic.MaxBytesPerWorkspace != 0))
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
	if ic := c.AuthBlock().Introspection; ic != nil {
		check("workspace_auth introspection url", ic.URL)
	}
	return out
}

// ineffectiveSettings names each setting written where it does nothing, and
// why, so that an operator who believes it is in force learns otherwise at
// start-up (`supervaizer check` lists the same lines).
func (c *Config) ineffectiveSettings(ra *ResolvedAuth) []string {
	var out []string
	if ra == nil || ra.JWKSURL == "" {
		// The JWKS source's periods: every workspace_auth jwks_* but the URL.
		wa := reflect.ValueOf(c.AuthBlock()).Elem()
		for _, f := range Fields() {
			if f.Parent == IndexOf("workspace_auth") && strings.HasPrefix(f.JSON, "jwks_") && f.JSON != "jwks_url" &&
				!wa.Field(f.Index).IsZero() {
				out = append(out, f.Name+" (no jwks_url: the key is a PEM, or tokens are not verified)")
			}
		}
	}
	if ra != nil && ra.Local && ra.AnySet {
		out = append(out, "local_mode (a workspace_auth setting is written: tokens are checked, as the SDK does)")
	}
	if c.VerifiedHeaders != nil && !*c.VerifiedHeaders && c.VerifiedHeadersForm != "" {
		out = append(out, "verified_headers_form (verified_headers is off: no verified context is sent)")
	}
	if ic := c.Idempotency; ic != nil && ic.Store == "off" {
		out = append(out, setInBlock(reflect.ValueOf(ic).Elem(), "idempotency", "store", "(idempotency is off)")...)
	}
	if rc := c.Registration; rc != nil && rc.Source == "off" {
		out = append(out, setInBlock(reflect.ValueOf(rc).Elem(), "registration", "source", "(registration is off)")...)
	}
	if rc := c.References; rc != nil && rc.Store == "off" {
		out = append(out, setInBlock(reflect.ValueOf(rc).Elem(), "references", "store", "(references is off)")...)
	}
	return out
}

// placeholderAgentIDs are the Studio agent ids our shipped configs write for
// the user to replace (Caddyfile.example, deploy/k8s).
var placeholderAgentIDs = []string{PlaceholderAgentID}

// PlaceholderAgents lists the slugs (sorted) whose Studio agent id is a
// shipped placeholder: Studio's tokens name the real id, so every token
// call for them fails workspace_authorization_agent_not_registered
// (start-up warns; `supervaizer check` refuses: gate/checkonly.go).
func PlaceholderAgents(agents map[string]string) []string {
	var out []string
	for slug, id := range agents {
		if slices.Contains(placeholderAgentIDs, id) {
			out = append(out, slug)
		}
	}
	sort.Strings(out)
	return out
}

// PlaceholderAgentID is the shipped placeholder agent id.
const PlaceholderAgentID = "replace-with-studio-agent-id"

// setInBlock names, with why, each setting of the block named block (its
// struct blk) written with a value, but for the one that turns it off.
func setInBlock(blk reflect.Value, block, off, why string) []string {
	var out []string
	at := IndexOf(block)
	for _, f := range Fields() {
		if f.Parent == at && f.JSON != off && !blk.Field(f.Index).IsZero() {
			out = append(out, f.Name+" "+why)
		}
	}
	return out
}

// sdkServerIDMinLen: Supervaizer SDK 1.8.0 uses SUPERVAIZER_SERVER_ID only
// when it is longer than this many characters (docs/sdk-wire.md).
const sdkServerIDMinLen = 5
