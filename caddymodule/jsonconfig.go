// The handler's JSON, decoded as Caddy decodes a module (unknown members
// refused), with errors a person can act on: the setting by its Caddyfile
// name and what it takes, instead of encoding/json's Go struct and type.

package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// UnmarshalJSON decodes the handler's JSON config strictly, as
// caddy.StrictUnmarshalJSON does, and rewrites a type error or an unknown
// member to name the setting (jsonSettingError).
func (h *Handler) UnmarshalJSON(b []byte) error {
	type plain Handler // the same fields without this method
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode((*plain)(h)); err != nil {
		return jsonSettingError(err)
	}
	return nil
}

// jsonSettingError names the setting of a JSON decoding error the way the
// Caddyfile writes it ("workspace_auth leeway"), with what it takes.
func jsonSettingError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fmt.Errorf("supervaizer_auth %s takes %s, not a JSON %s", settingName(typeErr.Field), takes(typeErr.Type), typeErr.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("supervaizer_auth: unknown setting %s (docs/directives.md lists every setting by its JSON name)", name)
	}
	return fmt.Errorf("supervaizer_auth: %w", err)
}

// settingName turns a JSON field path ("workspace_auth.leeway",
// "api_keys.scope") into the setting's Caddyfile name.
func settingName(field string) string {
	parts := strings.Split(field, ".")
	for i, p := range parts {
		if c, ok := caddyfileNames[p]; ok {
			parts[i] = c
		}
	}
	return strings.Join(parts, " ")
}

// caddyfileNames are the JSON members whose Caddyfile directive has another
// name; every other member is its directive's name.
var caddyfileNames = map[string]string{
	"api_keys":              "api_key",
	"agents":                "agent",
	"verified_headers_form": "verified_headers",
}

// takes says in words what a value of type t is written as.
func takes(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeOf(caddy.Duration(0)):
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
