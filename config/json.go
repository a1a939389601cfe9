// The handler's JSON, decoded as Caddy decodes a module (unknown members
// refused), with errors a person can act on: the setting by its Caddyfile
// name and what it takes, instead of encoding/json's Go struct and type;
// and the one zero rule of both front doors (Field.ZeroRefusal): a 0
// written for a duration, size or count that has no such value is refused
// here as the Caddyfile refuses it at its line.

package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// UnmarshalJSON decodes the handler's JSON config strictly, as Caddy's
// strict decoding does, rewrites a type error or an unknown member to name
// the setting (jsonSettingError), and refuses the zeros the table refuses
// (zeroProblems). caddymodule's Handler embeds Config, so this is the
// handler's decoding.
func (c *Config) UnmarshalJSON(b []byte) error {
	type plain Config // the same fields without this method
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode((*plain)(c)); err != nil {
		return jsonSettingError(err)
	}
	var raw map[string]any
	dec = json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("supervaizer_auth: %w", err)
	}
	return errors.Join(zeroProblems(raw, -1)...)
}

// zeroProblems are the zeros written in raw, the JSON of the block at
// index parent of Fields (-1: the handler), that the table refuses.
func zeroProblems(raw map[string]any, parent int) []error {
	var errs []error
	for i, f := range Fields() {
		v, ok := raw[f.JSON]
		if f.Parent != parent || !ok {
			continue
		}
		switch f.Kind {
		case KindDuration, KindSize, KindCount:
			if msg := f.ZeroRefusal(f.Name); msg != "" && jsonZero(v) {
				errs = append(errs, errors.New("supervaizer_auth: "+msg))
			}
		case KindBlock:
			if m, ok := v.(map[string]any); ok {
				errs = append(errs, zeroProblems(m, i)...)
			}
		case KindLines:
			if l, ok := v.([]any); ok {
				for _, e := range l {
					if m, ok := e.(map[string]any); ok {
						errs = append(errs, zeroProblems(m, i)...)
					}
				}
			}
		}
	}
	return errs
}

// jsonZero reports whether a JSON value is a zero number or a zero
// duration ("0s").
func jsonZero(v any) bool {
	switch v := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		return err == nil && f == 0
	case string:
		d, err := ParseDuration(v)
		return err == nil && d == 0
	}
	return false
}

// jsonSettingError names the setting of a JSON decoding error the way the
// Caddyfile writes it ("workspace_auth cache_size"), with what it takes.
func jsonSettingError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fmt.Errorf("supervaizer_auth %s takes %s, not %s", settingName(typeErr.Field), takes(typeErr.Type), jsonValue(typeErr.Value))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("supervaizer_auth: unknown setting %s (docs/directives.md lists every setting by its JSON name)", name)
	}
	return fmt.Errorf("supervaizer_auth: %w", err)
}

// jsonValue names what a type error met: "a JSON string" (the decoder's
// kinds), else the value itself (as Duration gives it).
func jsonValue(v string) string {
	switch v {
	case "string", "number", "bool", "array", "object":
		return "a JSON " + v
	}
	return v
}

// settingName turns a JSON field path ("workspace_auth.cache_size",
// "api_keys.scope") into the setting's Caddyfile words, from the table.
func settingName(path string) string {
	parent := -1
	var words []string
	for seg := range strings.SplitSeq(path, ".") {
		word := seg
		for i, f := range Fields() {
			if f.Parent == parent && f.JSON == seg {
				parent = i
				if f.Line != "" {
					word = f.Line
				}
				break
			}
		}
		words = append(words, word)
	}
	return strings.Join(words, " ")
}

// takes says in words what a value of type t is written as.
func takes(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[Duration]():
		return `a duration ("30s", "5m"; a number is nanoseconds)`
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "a whole number"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Slice:
		return "a list"
	case t.Kind() == reflect.Map || t.Kind() == reflect.Struct:
		return "an object"
	}
	return "a " + t.Kind().String()
}
