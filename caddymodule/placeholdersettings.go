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
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/supervaize/supervaizer-sidecar/config"
)

// placeholderAdvice ends the error of a placeholder unknown at start-up.
const placeholderAdvice = "use {env.NAME}, {file.PATH} or the Caddyfile's {$NAME}"

// expandPlaceholders expands, in place and once per handler (a second call
// does nothing), the placeholders of every string setting of h and its
// blocks, as the table of settings lists them (settingsExpander.block). Problems, each naming its
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
	e.block(reflect.ValueOf(&h.Config).Elem(), -1, "")
	return e.errs
}

// settingsExpander expands settings with repl, collecting the problems.
type settingsExpander struct {
	repl *caddy.Replacer
	errs []error
}

// block expands every string setting of blk, the struct of the table's
// block at index at (-1: the handler; config.Fields), named prefix ("api_key
// 1" for the first of a list of blocks), each under its name.
func (e *settingsExpander) block(blk reflect.Value, at int, prefix string) {
	for i, f := range config.Fields() {
		if f.Parent != at {
			continue
		}
		name := strings.TrimSpace(prefix + " " + cmp.Or(f.Line, f.JSON))
		if f.Self {
			name = prefix
		}
		v := blk.Field(f.Index)
		switch {
		case f.Kind == config.KindString:
			e.str(name, v.Addr().Interface().(*string), f.Secret)
		case f.Kind == config.KindList:
			e.list(name, v.Interface().([]string))
		case f.Kind == config.KindBlock && !v.IsNil():
			e.block(v.Elem(), i, name)
		case f.Kind == config.KindLines && v.Kind() == reflect.Slice:
			for j := range v.Len() {
				e.block(v.Index(j), i, name+" "+strconv.Itoa(j+1))
			}
		case f.Kind == config.KindLines:
			e.agents(blk.Addr().Interface().(*config.Config))
		}
	}
}

// agents expands each agent's slug and Studio id into a new map.
func (e *settingsExpander) agents(h *config.Config) {
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
