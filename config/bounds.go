// The bounds of every numeric setting, checked by one validator for both
// front doors: the ranges are data, the min= and max= options of each
// field's cfg tag (config.go), read into the table (table.go).
// docs/directives.md, "Directive reference", lists each bound.

package config

import (
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"
)

// unit is how a bounded setting's value is read and printed.
type unit int

const (
	unitDuration unit = iota // nanoseconds
	unitBytes                // bytes
	unitCount                // a plain number (entries, replicas)
)

// unitOf is the unit of a numeric kind.
func unitOf(k Kind) unit {
	switch k {
	case KindSize:
		return unitBytes
	case KindCount:
		return unitCount
	}
	return unitDuration
}

// bound is the range of one numeric setting. A zero value is the setting's
// default (absent) and is not checked, except where the setting says
// otherwise (the zero option: 0 is none); a negative value is always
// refused.
type bound struct {
	unit             unit
	minText, maxText string // as the tag writes them
}

// parse reads a bound's text in b's unit (0 for "").
func (b *bound) parse(s string) int64 {
	if s == "" {
		return 0
	}
	var v int64
	var err error
	switch b.unit {
	case unitDuration:
		var d time.Duration
		d, err = ParseDuration(s)
		v = int64(d)
	case unitBytes:
		var n uint64
		n, err = humanize.ParseBytes(s)
		v = int64(n)
	default:
		v, err = strconv.ParseInt(s, 10, 64)
	}
	if err != nil {
		panic("config: bad bound " + s) // a tag of config.go; TestTableBounds reads every one
	}
	return v
}

// Range is the bound's minimum and maximum (0: no minimum).
func (b *bound) Range() (min, max int64) { return b.parse(b.minText), b.parse(b.maxText) }

// check returns the problem of value v of the setting name (nil if none).
func (b *bound) check(name string, v int64) error {
	min, max := b.Range()
	switch {
	case v < 0:
		return fmt.Errorf("supervaizer_auth: %s must not be negative, not %s", name, b.format(v))
	case v != 0 && v < min:
		return fmt.Errorf("supervaizer_auth: %s must be at least %s, not %s", name, b.format(min), b.format(v))
	case v > max:
		return fmt.Errorf("supervaizer_auth: %s must be at most %s, not %s", name, b.format(max), b.format(v))
	}
	return nil
}

// format prints v in b's unit.
func (b *bound) format(v int64) string {
	switch b.unit {
	case unitDuration:
		return time.Duration(v).String()
	case unitBytes:
		if v < 0 {
			return fmt.Sprint(v)
		}
		return humanize.IBytes(uint64(v))
	}
	return fmt.Sprint(v)
}

// checkBounds returns the problems of c's bounded settings, each naming
// its setting: every field of the table with a bound, in a block that is
// present (a list of blocks' settings carry none).
func (c *Config) checkBounds() []error {
	var errs []error
	fields := Fields()
	for i, f := range fields {
		if f.Bound == nil {
			continue
		}
		v, ok := fieldValue(reflect.ValueOf(c).Elem(), fields, i)
		if !ok {
			continue
		}
		if err := f.Bound.check(f.Name, v); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// fieldValue is the numeric value of fields[i] in the Config root, false
// when a block on its way (or the field itself, a pointer) is absent.
func fieldValue(root reflect.Value, fields []Field, i int) (int64, bool) {
	var path []int
	for j := i; j >= 0; j = fields[j].Parent {
		path = append([]int{fields[j].Index}, path...)
	}
	v := root
	for _, idx := range path {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return 0, false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return 0, false // under a list of blocks
		}
		v = v.Field(idx)
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false
		}
		v = v.Elem()
	}
	return v.Int(), true
}
