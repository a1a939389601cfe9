// The table of settings, read once from Config's struct tags (config.go):
// each setting's name as the Caddyfile and the errors write it, its JSON
// path, its kind, bounds, zero rule, secrecy and environment variable.
// Everything that lists settings reads it: the validator (bounds.go), the
// JSON decoder's zero rule (json.go), the Caddyfile reader and the
// placeholder expansion (caddymodule), and the tests that hold
// docs/directives.md and the effective settings (settings.go) to it.

package config

import (
	"reflect"
	"strings"
	"sync"
)

// Kind is how a setting is written.
type Kind int

const (
	KindString   Kind = iota // one word or value
	KindBool                 // on|off (false when absent)
	KindSwitch               // on|off, absent distinct (*bool)
	KindDuration             // a duration (Duration, or *Duration)
	KindSize                 // a size in bytes (int64)
	KindCount                // a whole number (int)
	KindList                 // words ([]string)
	KindBlock                // a block of settings (*struct)
	KindLines                // repeated lines of several values ([]struct, map)
)

// Field is one setting of the table.
type Field struct {
	// Name is the setting as the Caddyfile, the errors and the directive
	// reference write it: the blocks, then the line ("workspace_auth
	// cache_size"; "idempotency file_path" for a setting with no line of
	// its own).
	Name string
	// Line is its Caddyfile line in its block ("" when it has none: a
	// value written on another line, such as registration's source).
	Line string
	// JSON is its JSON name in its block; Parent the block's Field index
	// (-1 at the top level).
	JSON   string
	Parent int
	Kind   Kind
	// Bound is its range (duration, size, count); ZeroOK, 0 is a value of
	// its own (a duration of none) rather than a default never written.
	Bound  *bound
	ZeroOK bool
	// Secret, Env, Repeat, Self and Custom are the tag's options
	// (config.go).
	Secret, Repeat, Self, Custom bool
	Env                          string
	// Index is the field's index in its struct; Type its Go type.
	Index int
	Type  reflect.Type
}

var (
	tableOnce sync.Once
	table     []Field
)

// Fields is the table of every setting, blocks before their settings, in
// Config's declaration order. Settings of a list of blocks (api_keys,
// limits rate) are listed under it.
func Fields() []Field {
	tableOnce.Do(func() { table = walkType(reflect.TypeFor[Config](), "", -1, nil) })
	return table
}

// FieldNamed returns the setting named name (Field.Name), or false.
func FieldNamed(name string) (Field, bool) {
	for _, f := range Fields() {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// walkType appends to out the fields of struct type t, in the block named
// prefix whose index in out is parent.
func walkType(t reflect.Type, prefix string, parent int, out []Field) []Field {
	for i := range t.NumField() {
		sf := t.Field(i)
		jsonName, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		f := Field{JSON: jsonName, Line: jsonName, Parent: parent, Index: i, Type: sf.Type}
		f.readTag(sf.Tag.Get("cfg"))
		name := f.Line
		if name == "" {
			name = jsonName
		}
		switch {
		case f.Self:
			f.Name = prefix
		case prefix == "":
			f.Name = name
		default:
			f.Name = prefix + " " + name
		}
		f.Kind = kindOf(sf.Type)
		if f.Bound != nil {
			f.Bound.unit = unitOf(f.Kind)
		}
		out = append(out, f)
		if elem := blockType(sf.Type); elem != nil {
			out = walkType(elem, f.Name, len(out)-1, out)
		}
	}
	return out
}

// readTag reads the cfg tag's options into f.
func (f *Field) readTag(tag string) {
	var min, max string
	for opt := range strings.SplitSeq(tag, ",") {
		key, val, _ := strings.Cut(opt, "=")
		switch key {
		case "line":
			f.Line = strings.TrimPrefix(val, "-")
		case "min":
			min = val
		case "max":
			max = val
		case "env":
			f.Env = val
		case "zero":
			f.ZeroOK = true
		case "secret":
			f.Secret = true
		case "repeat":
			f.Repeat = true
		case "self":
			f.Self = true
		case "custom":
			f.Custom = true
		}
	}
	if max != "" {
		f.Bound = &bound{minText: min, maxText: max}
	}
}

// kindOf is the kind of a field of type t.
func kindOf(t reflect.Type) Kind {
	switch {
	case t == reflect.TypeFor[Duration](), t == reflect.TypeFor[*Duration]():
		return KindDuration
	case t.Kind() == reflect.Int64:
		return KindSize
	case t.Kind() == reflect.Int:
		return KindCount
	case t.Kind() == reflect.Bool:
		return KindBool
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Bool:
		return KindSwitch
	case t.Kind() == reflect.Pointer:
		return KindBlock
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return KindList
	case t.Kind() == reflect.Slice, t.Kind() == reflect.Map:
		return KindLines
	}
	return KindString
}

// blockType is the struct type of the settings under a field of type t (a
// block, or a list of blocks), or nil.
func blockType(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct && t != reflect.TypeFor[Duration]() {
		return t
	}
	return nil
}

// Children are the fields of the block at index i of Fields (-1: the top
// level), in order.
func Children(i int) []Field {
	var out []Field
	for _, f := range Fields() {
		if f.Parent == i {
			out = append(out, f)
		}
	}
	return out
}

// IndexOf is the index in Fields of the setting named name, or -1.
func IndexOf(name string) int {
	for i, f := range Fields() {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// ZeroRefusal is the one answer to a 0 written for a duration, size or
// count that has no such value (both front doors: the Caddyfile at its
// line, a JSON config when decoded): a 0 would read as the setting left
// out, its default, so it most likely means something else (none, no
// limit). Its message names the setting as name; "" when f takes a 0.
func (f Field) ZeroRefusal(name string) string {
	if f.ZeroOK {
		return ""
	}
	kind := map[Kind]string{KindDuration: "duration", KindSize: "size", KindCount: "count"}[f.Kind]
	if kind == "" {
		return ""
	}
	return name + ": 0 is not a " + kind + " it takes: leave it out for the default"
}
