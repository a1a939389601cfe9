// Package pattern is the target-pattern language shared by the settings
// that name Supervaizer calls: introspection's actions and the limits
// rules. A target is an action name (job.start), a surface id or a
// DataResource scope (resource.<id>.<op>); a pattern is the same
// dot-separated segments, where "*" stands for exactly one segment
// (dataset.*.query, resource.*.import, *).
//
// A pattern or target may start with a namespace, "<name>:" (the limits
// write surface ids as "surface:<id>"): a pattern matches only targets of
// its own namespace, so job.start never matches surface:job.start and "*"
// matches one segment of the empty namespace only. A segment holds ASCII
// letters, digits, "_" and "-" (no space, no other punctuation): what an
// action, surface or scope id is made of.
package pattern

import (
	"fmt"
	"strings"
)

// Pattern is one parsed target pattern.
type Pattern struct {
	text string
	ns   string // namespace without its ":" ("" for none)
	segs []string
}

// Parse reads one pattern. Errors: an empty segment, a "*" mixed with
// other characters in one segment, a character no id holds (a space
// included), an empty or malformed namespace.
func Parse(p string) (Pattern, error) {
	bad := func() (Pattern, error) {
		return Pattern{}, fmt.Errorf("bad target pattern %q: segments are names (letters, digits, _ and -) or *, "+
			"separated by dots, after an optional <namespace>:", p)
	}
	ns, rest, hasNS := strings.Cut(p, ":")
	if !hasNS {
		ns, rest = "", p
	} else if !isName(ns) {
		return bad()
	}
	segs := strings.Split(rest, ".")
	for _, s := range segs {
		if s != "*" && !isName(s) {
			return bad()
		}
	}
	return Pattern{text: p, ns: ns, segs: segs}, nil
}

// isName reports whether s is a non-empty run of ASCII letters, digits,
// "_" and "-".
func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// String is the pattern as written.
func (p Pattern) String() string { return p.text }

// Namespace is the pattern's namespace without its ":" ("" for none).
func (p Pattern) Namespace() string { return p.ns }

// Match reports whether target is in p's namespace and has as many
// dot-separated segments as p, each equal to p's or matched by "*".
func (p Pattern) Match(target string) bool {
	if p.ns != "" {
		var ok bool
		if target, ok = strings.CutPrefix(target, p.ns+":"); !ok {
			return false
		}
	} else if strings.Contains(target, ":") {
		return false
	}
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
