// Package pattern is the target-pattern language shared by the settings
// that name Supervaizer calls: introspection's actions and the limits
// rules. A target is an action name (job.start), a surface id or a
// DataResource scope (resource.<id>.<op>); a pattern is the same
// dot-separated segments, where "*" stands for exactly one segment
// (dataset.*.query, resource.*.import, *).
package pattern

import (
	"fmt"
	"strings"
)

// Pattern is one parsed target pattern.
type Pattern struct {
	text string
	segs []string
}

// Parse reads one pattern. Errors: an empty segment, or a "*" mixed with
// other characters in one segment.
func Parse(p string) (Pattern, error) {
	segs := strings.Split(p, ".")
	for _, s := range segs {
		if s == "" || (strings.Contains(s, "*") && s != "*") {
			return Pattern{}, fmt.Errorf("bad target pattern %q: segments are names or *, separated by dots", p)
		}
	}
	return Pattern{text: p, segs: segs}, nil
}

// String is the pattern as written.
func (p Pattern) String() string { return p.text }

// Match reports whether target has as many dot-separated segments as p,
// each equal to p's or matched by "*".
func (p Pattern) Match(target string) bool {
	for i, seg := range p.segs {
		var part string
		var more bool
		part, target, more = strings.Cut(target, ".")
		if part == "" || (seg != "*" && seg != part) {
			return false
		}
		if more != (i < len(p.segs)-1) {
			return false
		}
	}
	return true
}

// Set is a list of patterns; it matches a target that any of them matches.
type Set []Pattern

// ParseSet parses every pattern of ps.
func ParseSet(ps []string) (Set, error) {
	s := make(Set, 0, len(ps))
	for _, p := range ps {
		pat, err := Parse(p)
		if err != nil {
			return nil, err
		}
		s = append(s, pat)
	}
	return s, nil
}

// Match reports whether a pattern of s matches target.
func (s Set) Match(target string) bool {
	for _, p := range s {
		if p.Match(target) {
			return true
		}
	}
	return false
}
