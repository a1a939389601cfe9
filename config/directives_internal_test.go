package config

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// directiveLines reads the Caddyfile of docs/directives.md's "Directive
// reference": each line's setting name (its blocks, then its first word)
// and the text of that line with its continuation comments.
func directiveLines(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../docs/directives.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ref, _ := strings.Cut(string(b), "## Directive reference")
	_, ref, _ = strings.Cut(ref, "```caddyfile\n")
	ref, _, _ = strings.Cut(ref, "```")
	out := map[string]string{}
	var blocks []string
	last := ""
	for _, line := range strings.Split(ref, "\n") {
		word, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch {
		case word == "" || strings.HasPrefix(word, "#"):
			if last != "" {
				out[last] += "\n" + line
			}
			continue
		case word == "}":
			blocks = blocks[:len(blocks)-1]
			continue
		}
		code, _, _ := strings.Cut(line, "#")
		name := strings.Join(append(slices.Clone(blocks[min(1, len(blocks)):]), word), " ")
		if len(blocks) == 0 {
			name = word // supervaizer_auth itself
		}
		out[name] += line
		last = name
		if strings.HasSuffix(strings.TrimSpace(code), "{") {
			blocks = append(blocks, word)
		}
	}
	return out
}

// ownLine reports whether f is written on a Caddyfile line of its own
// (not a value on another line, nor a part of a repeated line's values).
func ownLine(f Field) bool {
	return f.Line != "" && !f.Self && (f.Parent < 0 || Fields()[f.Parent].Kind != KindLines)
}

// TestDirectiveReferenceMatchesTable: docs/directives.md's directive
// reference shows every Caddyfile line of the table (config.go) in its
// block, and no line the table does not have; a setting with an
// environment fallback names its variable on its line.
func TestDirectiveReferenceMatchesTable(t *testing.T) {
	doc := directiveLines(t)
	if len(doc) < 60 {
		t.Fatalf("only %d lines read from the directive reference", len(doc))
	}
	lines := map[string]bool{"supervaizer_auth": true}
	for _, f := range Fields() {
		if !ownLine(f) {
			continue
		}
		lines[f.Name] = true
		if _, ok := doc[f.Name]; !ok {
			t.Errorf("%s is not in docs/directives.md's directive reference", f.Name)
		}
		if f.Env != "" && !strings.Contains(doc[f.Name], "$"+f.Env) {
			t.Errorf("%s: its line in docs/directives.md does not name $%s", f.Name, f.Env)
		}
	}
	for name := range doc {
		if !lines[name] {
			t.Errorf("docs/directives.md shows %q, which is not a setting of the table", name)
		}
	}
}

// TestDirectiveReferenceBounds: the directive reference states each
// bounded setting's maximum on its line, as the table writes it (or in
// days, or a duration's seconds).
func TestDirectiveReferenceBounds(t *testing.T) {
	doc := directiveLines(t)
	for _, f := range Fields() {
		if f.Bound == nil || !ownLine(f) {
			continue
		}
		_, max := f.Bound.Range()
		ways := []string{regexp.QuoteMeta(f.Bound.maxText), regexp.QuoteMeta(f.Bound.format(max))}
		if f.Bound.unit == unitDuration {
			ways = append(ways, strconv.FormatInt(max/1e9, 10))
			if h := max / 3600e9; h >= 24 && h%24 == 0 {
				ways = append(ways, strconv.FormatInt(h/24, 10)+"d")
			}
		}
		if !regexp.MustCompile(`(^|[^\w.])(` + strings.Join(ways, "|") + `)([^\w]|$)`).MatchString(doc[f.Name]) {
			t.Errorf("%s: its line in docs/directives.md does not state its maximum, %s", f.Name, f.Bound.maxText)
		}
	}
}
