// Placeholders in the handler's settings: every string setting an operator
// writes ({env.NAME}, {file.PATH}, {system.*}, ...) is expanded once, at
// the start of build (provision.go), with Caddy's global replacer, before
// any check reads it, so that Provision and `supervaizer check` judge and
// show the expanded values. A placeholder the global replacer does not
// know (a request placeholder such as {http.request.header.X}) is refused,
// naming its setting: the sidecar never takes a placeholder's text as a
// value (a key, a server id).

package caddymodule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// placeholderAdvice ends the error of a placeholder unknown at start-up.
const placeholderAdvice = "use {env.NAME}, {file.PATH} or the Caddyfile's {$NAME}"

// expandPlaceholders expands, in place and once per handler (a second call
// does nothing), the placeholders of every string setting of h and its
// blocks (settingsExpander.handler lists them). Problems, each naming its
// setting: a placeholder the global replacer does not know (the value is
// then left as written: the build that reports the problem keeps
// nothing), two agent slugs that expand to the same slug, a setting with
// a placeholder that expands to an empty value (an unset variable, an
// unreadable or empty file), even among other text (srv-{env.T} would be
// srv-), or that expands to a blank value: refused, never taken for a
// setting left out, which could fall back to a default or to an
// environment variable.
func (h *Handler) expandPlaceholders() []error {
	if h.placeholdersExpanded {
		return nil
	}
	h.placeholdersExpanded = true
	e := &settingsExpander{repl: caddy.NewReplacer()}
	e.handler(h)
	return e.errs
}

// settingsExpander expands settings with repl, collecting the problems.
type settingsExpander struct {
	repl *caddy.Replacer
	errs []error
}

// handler expands the top-level settings, then each block's.
func (e *settingsExpander) handler(h *Handler) {
	e.str("server_id", &h.ServerID, false)
	for i := range h.APIKeys {
		n := "api_key " + strconv.Itoa(i+1)
		e.str(n, &h.APIKeys[i].Key, true)
		e.str(n+" scope", &h.APIKeys[i].Scope, false)
	}
	e.agents(h)
	for _, s := range []struct {
		name string
		p    *string
	}{
		{"upstream", &h.Upstream}, {"verified_headers_form", &h.VerifiedHeadersForm},
		{"legacy_routes", &h.LegacyRoutes}, {"other_routes", &h.OtherRoutes}, {"audit_log", &h.AuditLog},
	} {
		e.str(s.name, s.p, false)
	}
	if wa := h.WorkspaceAuth; wa != nil {
		e.str("workspace_auth issuer", &wa.Issuer, false)
		e.str("workspace_auth audience", &wa.Audience, false)
		e.str("workspace_auth public_key", &wa.PublicKey, false)
		e.str("workspace_auth jwks_url", &wa.JWKSURL, false)
		if ic := wa.Introspection; ic != nil {
			e.str("workspace_auth introspection url", &ic.URL, false)
			e.str("workspace_auth introspection client_id", &ic.ClientID, true)
			e.str("workspace_auth introspection client_secret", &ic.ClientSecret, true)
			e.str("workspace_auth introspection bearer", &ic.Bearer, true)
			e.list("workspace_auth introspection actions", ic.Actions)
		}
	}
	if r := h.Registration; r != nil {
		e.str("registration source", &r.Source, false)
		e.str("registration file", &r.File, false)
		e.list("registration a2a_versions", r.A2AVersions)
		e.list("registration a2ui_versions", r.A2UIVersions)
	}
	if ic := h.Idempotency; ic != nil {
		e.store("idempotency", &ic.Store, &ic.RedisURL, &ic.RedisMode, &ic.KeyPrefix)
		e.str("idempotency file_path", &ic.FilePath, false)
		e.list("idempotency actions", ic.Actions)
	}
	if rc := h.References; rc != nil {
		e.list("references fields", rc.Fields)
		e.str("references unknown", &rc.Unknown, false)
		e.str("references store", &rc.Store, false)
		e.str("references file_path", &rc.FilePath, false)
		e.str("references redis_url", &rc.RedisURL, true)
	}
	if lc := h.Limits; lc != nil {
		e.store("limits", &lc.Store, &lc.RedisURL, &lc.RedisMode, &lc.KeyPrefix)
		e.str("limits on_store_error", &lc.OnStoreError, false)
		for i := range lc.Rate {
			n := "limits rate " + strconv.Itoa(i+1)
			e.list(n+" targets", lc.Rate[i].Targets)
			e.str(n+" rate", &lc.Rate[i].Rate, false)
		}
		for i := range lc.Concurrency {
			e.list("limits concurrency "+strconv.Itoa(i+1)+" targets", lc.Concurrency[i].Targets)
		}
	}
}

// store expands the store settings a block shares with the other (the
// redis URL may hold a password: a secret).
func (e *settingsExpander) store(block string, store, redisURL, redisMode, keyPrefix *string) {
	e.str(block+" store", store, false)
	e.str(block+" redis_url", redisURL, true)
	e.str(block+" redis_mode", redisMode, false)
	e.str(block+" key_prefix", keyPrefix, false)
}

// agents expands each agent's slug and Studio id into a new map.
func (e *settingsExpander) agents(h *Handler) {
	if len(h.Agents) == 0 {
		return
	}
	agents := make(map[string]string, len(h.Agents))
	for slug, id := range h.Agents {
		written := slug
		e.str("agent "+written, &slug, false)
		e.str("agent "+written+" id", &id, false)
		if _, dup := agents[slug]; dup {
			e.errs = append(e.errs, fmt.Errorf("supervaizer_auth: agent %s: expands to the slug of another agent line", written))
			continue
		}
		agents[slug] = id
	}
	h.Agents = agents
}

// list expands each element of l in place.
func (e *settingsExpander) list(name string, l []string) {
	for i := range l {
		e.str(name+" "+strconv.Itoa(i+1), &l[i], false)
	}
}

// str expands *p in place (expandSetting); a problem names the setting.
// The error never shows the value. For a secret setting it shows no text
// of the value at all, not even a placeholder: braces in a secret written
// literally may enclose part of it; the one exception is an unknown
// placeholder of a request's namespace (requestPlaceholderPrefix), which
// is a placeholder, not a secret.
func (e *settingsExpander) str(name string, p *string, secret bool) {
	v, ph, err := expandSetting(e.repl, *p)
	switch {
	case err != nil:
		e.errs = append(e.errs, fmt.Errorf("supervaizer_auth: %s: %w", name, err))
	case ph.name == "":
		if v != *p && strings.TrimSpace(v) == "" {
			// Written, but blank once expanded: refused rather than
			// taken for a setting left out (an optional one would
			// silently fall back to its default or its environment
			// variable).
			e.errs = append(e.errs, fmt.Errorf("supervaizer_auth: %s: its placeholders expand to a blank value", name))
			return
		}
		*p = v
	case ph.empty && secret:
		e.errs = append(e.errs, fmt.Errorf("supervaizer_auth: %s: a placeholder in it expands to an empty value (an unset variable or an unreadable or empty file; not shown: the setting is a secret)", name))
	case ph.empty:
		e.errs = append(e.errs, fmt.Errorf("supervaizer_auth: %s: a placeholder in it expands to an empty value: %s (an unset variable or an unreadable or empty file)", name, ph.name))
	case secret && !strings.HasPrefix(ph.name, "{"+requestPlaceholderPrefix):
		e.errs = append(e.errs, fmt.Errorf("supervaizer_auth: %s: holds a placeholder not known at start-up (not shown: braces in a secret may enclose part of it; a literal brace is written \\{); %s", name, placeholderAdvice))
	default:
		e.errs = append(e.errs, fmt.Errorf("supervaizer_auth: %s: %s is not a placeholder known at start-up; %s", name, ph.name, placeholderAdvice))
	}
}

// requestPlaceholderPrefix starts the placeholders Caddy knows only during
// a request ({http.request.header.X}, {http.vars.*}): such a name may be
// shown in the error of a secret setting.
const requestPlaceholderPrefix = "http."

// placeholderProblem is the first placeholder of a setting that cannot be
// used: name is "" when there is none, else the placeholder with its
// braces; empty tells a known placeholder whose value is empty from one
// the replacer does not know.
type placeholderProblem struct {
	name  string
	empty bool
}

// errPlaceholderProblem stops the replacer at a placeholderProblem.
var errPlaceholderProblem = errors.New("placeholder problem")

// expandSetting is the one rule of a setting's placeholders, for every
// setting (introspection's included): v with each placeholder repl knows
// replaced (\{ and \} are literal braces), in one pass (a {file.*} is read
// once, and a value is never expanded again). ph is the first placeholder
// repl does not know or whose value is empty (an unset variable, an
// unreadable or empty file), out then being v as written; err, input
// Caddy's replacer refuses outright (too many unclosed braces).
func expandSetting(repl *caddy.Replacer, v string) (out string, ph placeholderProblem, err error) {
	out, err = repl.ReplaceFunc(v, func(key string, val any) (any, error) {
		if caddy.ToString(val) != "" {
			return val, nil
		}
		// An unknown placeholder reaches here with a nil value, as does
		// an unreadable file: the file provider knows every file.* (and
		// asking it again would read the file again).
		known := strings.HasPrefix(key, "file.")
		if !known {
			_, known = repl.Get(key)
		}
		ph = placeholderProblem{name: "{" + key + "}", empty: known}
		return nil, errPlaceholderProblem
	})
	if errors.Is(err, errPlaceholderProblem) {
		return v, ph, nil
	}
	if err != nil {
		return v, placeholderProblem{}, err
	}
	return out, placeholderProblem{}, nil
}
