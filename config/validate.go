// The one validation of a Config: every range (the table's bounds,
// bounds.go), every word and every rule between settings, written once.
// The Caddyfile adapts to the same JSON, so a Caddyfile and the equivalent
// JSON config are refused or accepted identically (docs/directives.md,
// "Directive reference", lists each bound).

package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/dustin/go-humanize"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/pattern"
	"github.com/supervaize/supervaizer-sidecar/references"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// MemoryLimits are the memory and file stores' bounds of ic.
func (ic *IdempotencyConfig) MemoryLimits() idempotency.MemoryOptions {
	return idempotency.MemoryOptions{MaxEntries: ic.MaxEntries, MaxBytes: ic.MaxBytes,
		MaxEntriesPerGroup: ic.MaxEntriesPerWorkspace, MaxBytesPerGroup: ic.MaxBytesPerWorkspace}
}

// Default body bounds, in bytes, when max_body is not set (docs/errors.md, "Body
// limits").
const (
	DefaultMaxBody     = 1 << 20  // public, events, legacy and other routes: 1 MiB
	DefaultMaxBodyA2A  = 16 << 20 // POST /a2a: 16 MiB (inline file fields)
	DefaultMaxBodyData = 16 << 20 // DataResource routes: 16 MiB (bulk imports)
	// DefaultBodyTimeout bounds the time to receive a body when
	// body_timeout is not set.
	DefaultBodyTimeout = 10 * time.Second
)

// EffectiveBodyBounds are max_body, max_body_a2a and max_body_data in
// effect: each as set, else max_body when that is set, else its default.
func (c *Config) EffectiveBodyBounds() (maxBody, a2a, data int64) {
	pick := func(v, fallback int64) int64 {
		switch {
		case v > 0:
			return v
		case c.MaxBody > 0:
			return c.MaxBody
		}
		return fallback
	}
	return pick(c.MaxBody, DefaultMaxBody), pick(c.MaxBodyA2A, DefaultMaxBodyA2A), pick(c.MaxBodyData, DefaultMaxBodyData)
}

// DefaultBodyMemory is the default body_memory budget (the process's
// budget is gate.BodyMemory): 32 MiB, two /a2a bodies at the
// 16 MiB default bound, sized for the k8s base's 256 MiB container. A held
// body costs up to about five times its size at peak with idempotency (the
// body, its buffer's growth, the envelope parse's key checks, the
// fingerprint's sorted members, garbage not yet collected; for every shape
// of body deploy/k8s/body_memory_test.go sends): 5 × 32 MiB + 64 MiB stays under
// 90 % of 256 MiB (deploy/k8s/README.md, "Memory";
// deploy/k8s/body_memory_test.go measures it).
const DefaultBodyMemory = 32 << 20

// EffectiveBodyMemory is the body memory budget in effect: body_memory,
// else DefaultBodyMemory.
func (c *Config) EffectiveBodyMemory() int64 {
	if c.BodyMemory > 0 {
		return c.BodyMemory
	}
	return DefaultBodyMemory
}

// EffectiveBodyTimeout is body_timeout in effect.
func (c *Config) EffectiveBodyTimeout() time.Duration {
	if c.BodyTimeout > 0 {
		return c.BodyTimeout.D()
	}
	return DefaultBodyTimeout
}

// Validate returns every problem of c that needs neither I/O nor the
// environment, each naming its setting: every bound (the table's,
// bounds.go), the words, the invariants between settings
// (checkInvariants) and the limits block (limits.Config.Validate); nil
// when there is none.
func (c *Config) Validate() error {
	errs := append(c.checkBounds(), c.checkInvariants()...)
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	for _, w := range []struct {
		name, value string
		allowed     []string
		say         string
	}{
		{"legacy_routes", c.LegacyRoutes, []string{"", "allow", "deny"}, "allow or deny"},
		{"verified_headers_form", c.VerifiedHeadersForm, []string{"", VerifiedFormHeaders, VerifiedFormCompact}, "headers or compact"},
		{"audit_log", c.AuditLog, []string{"", "all", "deny"}, "all or deny"},
		{"other_routes", c.OtherRoutes, []string{"", "deny", "api_key", "public"}, "deny, api_key or public"},
	} {
		if !slices.Contains(w.allowed, w.value) {
			bad("%s must be %s, not %q", w.name, w.say, w.value)
		}
	}
	if c.Limits != nil {
		for _, err := range c.Limits.Domain().Validate() {
			errs = append(errs, fmt.Errorf("supervaizer_auth: %w", err))
		}
	}
	return errors.Join(errs...)
}

// AuthBlock is the workspace_auth block, empty when absent.
func (c *Config) AuthBlock() *WorkspaceAuth {
	if c.WorkspaceAuth == nil {
		return &WorkspaceAuth{}
	}
	return c.WorkspaceAuth
}

// RegistrationBlock is the registration block, empty when absent.
func (c *Config) RegistrationBlock() *RegistrationConfig {
	if c.Registration == nil {
		return &RegistrationConfig{}
	}
	return c.Registration
}

// VerifiedFormHeaders and VerifiedFormCompact are verified_headers_form's
// words (docs/verified-context.md).
const (
	VerifiedFormHeaders = "headers" // ten X-Supervaize-Verified-* headers (default)
	VerifiedFormCompact = "compact" // one X-Supervaize-Verified-Context header
)

// checkInvariants returns the problems between settings, each naming both:
// the body memory budget below the /a2a bound, a key given twice, the keys,
// slugs, ids and server id no request could match (checkHeaderValues),
// and the idempotency invariants (idempotencyInvariants).
func (c *Config) checkInvariants() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	// On the effective values, defaults included: a max_body_a2a over the
	// default budget, body_memory not set, would answer every call over
	// the budget a retryable 503 forever.
	if _, a2a, _ := c.EffectiveBodyBounds(); c.EffectiveBodyMemory() < a2a {
		what := humanize.IBytes(uint64(c.EffectiveBodyMemory()))
		if c.BodyMemory == 0 {
			what += ", the default"
		}
		bad("body_memory (%s) must be at least max_body_a2a (%s): a call at the bound could never be held; set body_memory",
			what, humanize.IBytes(uint64(a2a)))
	}
	seen := map[string]int{}
	for i, k := range c.APIKeys {
		if j, dup := seen[k.Key]; dup && k.Key != "" {
			bad("api_key %s is given twice (api_key %d and %d): one line per key, with its scope", redact.Fingerprint(k.Key), j+1, i+1)
		}
		seen[k.Key] = i
	}
	errs = append(errs, c.checkHeaderValues()...)
	errs = append(errs, c.checkRepeats()...)
	if ic := c.Idempotency; ic != nil && ic.Store != "off" {
		errs = append(errs, idempotencyInvariants(ic)...)
	}
	if c.References != nil {
		errs = append(errs, c.referencesInvariants()...)
	}
	return errs
}

// checkHeaderValues refuses the names and keys that could never match
// what a request carries: a key with surrounding spaces or a control
// character (an HTTP header value has neither), an agent slug outside
// registration.CheckSlug's rule (the one rule of a slug), an agent id with
// a space or a control character (a token's claim is compared to it as
// is), a server id with a space (any whitespace) or a control character.
func (c *Config) checkHeaderValues() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	for i, k := range c.APIKeys {
		if k.Key != "" && (strings.TrimSpace(k.Key) != k.Key || hasControl(k.Key)) {
			bad("api_key %d must not have surrounding spaces or control characters: a header never carries them, so it could never match", i+1)
		}
	}
	for slug, id := range c.Agents {
		switch err := registration.CheckSlug(slug); {
		case err != nil:
			bad("agents: %v", err)
		case strings.ContainsFunc(id, isSpaceOrControl):
			bad("agent %q %q: an agent id holds no space or control character", slug, id)
		}
	}
	if strings.ContainsFunc(c.ServerID, isSpaceOrControl) || strings.ContainsFunc(c.ServerID, unicode.IsSpace) {
		bad("server_id %q must not be blank or hold a space or a control character", c.ServerID)
	}
	return errs
}

// checkRepeats refuses a value given twice in one list (docs/directives.md:
// nothing is given twice): the covered actions of idempotency and of
// introspection, the targets of one limits rule, the accepted card
// versions. A repeat changes nothing the sidecar does, but says something
// the operator did not mean (a typo for another name, most often);
// references fields are referencesInvariants'.
func (c *Config) checkRepeats() []error {
	var errs []error
	check := func(setting string, list []string) {
		seen := map[string]bool{}
		for _, v := range list {
			if seen[v] {
				errs = append(errs, fmt.Errorf("supervaizer_auth: %s: %q is given twice: give each once", setting, v))
				return
			}
			seen[v] = true
		}
	}
	if ic := c.Idempotency; ic != nil {
		check("idempotency actions", ic.Actions)
	}
	if wa := c.WorkspaceAuth; wa != nil && wa.Introspection != nil {
		check("workspace_auth introspection actions", wa.Introspection.Actions)
	}
	if rc := c.Registration; rc != nil {
		check("registration a2a_versions", rc.A2AVersions)
		check("registration a2ui_versions", rc.A2UIVersions)
	}
	if lc := c.Limits; lc != nil {
		for _, r := range lc.Rate {
			check(fmt.Sprintf("limits rate %s %s", strings.Join(r.Targets, " "), r.Rate), r.Targets)
		}
		for _, r := range lc.Concurrency {
			check(fmt.Sprintf("limits concurrency %s %d", strings.Join(r.Targets, " "), r.Max), r.Targets)
		}
	}
	return errs
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}

// idempotencyInvariants are the idempotency block's rules between
// settings, each checked by its owner (idempotency/validate.go): the
// guard's durations (ttl at least lock_ttl, lock_ttl above
// upstream_timeout), each per-workspace share at most its total and its
// default share (an eighth of the total) not 0, and the store-specific
// settings only with their store.
func idempotencyInvariants(ic *IdempotencyConfig) []error {
	var errs []error
	add := func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				errs = append(errs, fmt.Errorf("supervaizer_auth: idempotency %w", e))
			}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("supervaizer_auth: idempotency %w", err))
		}
	}
	add(idempotency.Options{TTL: ic.TTL.D(), LockTTL: ic.LockTTL.D(), UpstreamTimeout: ic.UpstreamTimeout.D()}.Validate())
	add(ic.MemoryLimits().Validate())
	var set []string
	for name, given := range map[string]bool{
		"redis_url": ic.RedisURL != "", "redis_mode": ic.RedisMode != "",
		"min_replicas_ack": ic.MinReplicasAck != 0, "replica_ack_timeout": ic.ReplicaAckTimeout != 0,
		"key_prefix": ic.KeyPrefix != "", "file_path": ic.FilePath != "",
		"max_entries": ic.MaxEntries != 0, "max_entries_per_workspace": ic.MaxEntriesPerWorkspace != 0,
	} {
		if given {
			set = append(set, name)
		}
	}
	slices.Sort(set) // one order from one config
	for _, err := range idempotency.CheckStoreSettings(ic.Store, set) {
		add(err)
	}
	for _, a := range ic.Actions {
		// An action the guard would never meet (a comma list, a pattern, a
		// blank) would leave the calls meant to be covered uncovered.
		if p, err := pattern.Parse(a); err != nil || p.Namespace() != "" || strings.Contains(a, "*") {
			add(fmt.Errorf("actions: %q is not an action name (letters, digits, _ and -, separated by dots; one name an argument, no * and no namespace)", a))
		}
	}
	if ic.Store == idempotency.StoreRedis && ic.RedisURL == "" {
		// No default address: in a pod 127.0.0.1 is the pod's own, where
		// no shared store runs (the limits block refuses the same).
		add(errors.New("store redis needs redis_url"))
	}
	return errs
}

// RegistrationKind validates the registration settings and returns the
// source kind ("from_upstream" or "file"), or "" when registration is off
// (notEnforced: off only because no upstream is set).
//
// Errors: an unknown source; file without a path; from_upstream without an
// upstream (named by the error); no agent configured while a source is on;
// an upstream that is not an http(s) URL.
func (c *Config) RegistrationKind() (src string, notEnforced bool, err error) {
	rc := c.RegistrationBlock()
	src = rc.Source
	if src == "" {
		if c.Upstream == "" {
			return "", true, nil
		}
		src = "from_upstream"
	}
	switch src {
	case "off":
		return "", false, nil
	case "from_upstream":
		if _, err := c.UpstreamURL("registration from_upstream"); err != nil {
			return "", false, err
		}
	case "file":
		if rc.File == "" {
			return "", false, errors.New("supervaizer_auth: registration file needs a path")
		}
	default:
		return "", false, fmt.Errorf("supervaizer_auth: registration must be from_upstream, file or off, not %q", src)
	}
	if len(c.Agents) == 0 {
		return "", false, fmt.Errorf("supervaizer_auth: registration %s needs at least one agent <slug> line", src)
	}
	return src, false, nil
}

// UpstreamURL returns the upstream setting without a trailing slash, for
// the setting named by who. Errors: no upstream (naming who needs it), or
// one that is not an http(s) URL with a host.
func (c *Config) UpstreamURL(who string) (string, error) {
	if c.Upstream == "" {
		return "", fmt.Errorf("supervaizer_auth: %s needs upstream <url> (the agent's base URL, e.g. http://127.0.0.1:8000)", who)
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("supervaizer_auth: upstream %q must be an http(s) URL", redact.URL(c.Upstream))
	}
	return strings.TrimRight(c.Upstream, "/"), nil
}

// EffectiveReferences are the references settings in effect: the
// defaults applied, the store's kind, path and Redis address taken from
// the idempotency block where not given (its file store's path +
// ".references", its redis_url and redis_mode).
type EffectiveReferences struct {
	Fields                     []string
	DataItems, LearnFromEvents bool
	Unknown                    string
	Store, FilePath            string
	RedisURL, RedisMode        string
}

// EffectiveReferences resolves c.References (nil: the block is absent).
func (c *Config) EffectiveReferences() EffectiveReferences {
	rc := c.References
	e := EffectiveReferences{Fields: rc.Fields, DataItems: rc.DataItems == nil || *rc.DataItems,
		LearnFromEvents: rc.LearnFromEvents == nil || *rc.LearnFromEvents, Unknown: rc.Unknown,
		Store: rc.Store, FilePath: rc.FilePath, RedisURL: rc.RedisURL}
	if len(e.Fields) == 0 {
		e.Fields = references.RequestFields
	}
	if e.Unknown == "" {
		e.Unknown = "bind"
	}
	ic := c.Idempotency
	if ic == nil {
		ic = &IdempotencyConfig{}
	}
	if e.Store == "" {
		e.Store = ic.Store
		if e.Store == "" || e.Store == "off" {
			e.Store = "memory"
		}
	}
	if e.Store == "file" && e.FilePath == "" && ic.Store == "file" && ic.FilePath != "" {
		e.FilePath = ic.FilePath + ".references"
	}
	if e.Store == "redis" {
		if e.RedisURL == "" && ic.Store == idempotency.StoreRedis {
			e.RedisURL = ic.RedisURL
		}
		e.RedisMode = ic.RedisMode
		if e.RedisMode == "" {
			e.RedisMode = "single"
		}
	}
	return e
}

// referencesInvariants are the references block's rules: the words, each
// field known and given once, each store's own setting only with it, and
// what each store needs.
func (c *Config) referencesInvariants() []error {
	rc := c.References
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: references "+format, args...))
	}
	if !slices.Contains([]string{"", "bind", "deny"}, rc.Unknown) {
		bad("unknown must be bind or deny, not %q", rc.Unknown)
	}
	if !slices.Contains([]string{"", "memory", "file", "redis", "off"}, rc.Store) {
		bad("store must be memory, file, redis or off, not %q", rc.Store)
		return errs
	}
	seen := map[string]bool{}
	for _, f := range rc.Fields {
		switch {
		case !slices.Contains(references.RequestFields, f):
			bad("fields: %q is not a bound field (job_id, case_id, step_id, draft_session_id, request_id)", f)
		case seen[f]:
			bad("fields: %q is given twice", f)
		}
		seen[f] = true
	}
	e := c.EffectiveReferences()
	if rc.FilePath != "" && e.Store != "file" {
		bad("file_path is only for store file (the store is %s)", e.Store)
	}
	if rc.RedisURL != "" && e.Store != "redis" {
		bad("redis_url is only for store redis (the store is %s)", e.Store)
	}
	if total := rc.MaxEntries; rc.MaxPerWorkspace > 0 {
		if total <= 0 {
			total = references.DefaultMaxEntries
		}
		if rc.MaxPerWorkspace > total {
			bad("max_per_workspace (%d) must be at most max_entries (%d%s)", rc.MaxPerWorkspace, total,
				map[bool]string{true: ", the default", false: ""}[rc.MaxEntries == 0])
		}
	}
	switch {
	case e.Store == "file" && e.FilePath == "":
		bad("store file needs a path: store file <path> (JSON file_path)")
	case e.Store == "redis" && e.RedisURL == "":
		bad("store redis needs redis_url (or the idempotency block's store redis)")
	}
	return errs
}

// VerifiedHeadersSetting is verified_headers in effect, as the Caddyfile
// writes it: off, on (the ten headers) or compact.
func (c *Config) VerifiedHeadersSetting() string {
	switch {
	case c.VerifiedHeaders != nil && !*c.VerifiedHeaders:
		return "off"
	case c.VerifiedHeadersForm == VerifiedFormCompact:
		return VerifiedFormCompact
	}
	return "on"
}

// AgentSlugs are the configured agent slugs, sorted.
func (c *Config) AgentSlugs() []string {
	slugs := make([]string, 0, len(c.Agents))
	for slug := range c.Agents {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	return slugs
}
