// Package docs holds the documents the code cites (sdk-wire.md,
// architecture.md, idempotency.md) and a test that keeps those citations
// followable: every document a comment names is in this repository.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoFiles returns the .go and .md files of the repository (paths relative
// to its root, slash-separated) with their text, skipping hidden
// directories, bin/ and bench/results/.
func repoFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, ".."+string(filepath.Separator)))
		if d.IsDir() {
			if p != ".." && (strings.HasPrefix(d.Name(), ".") || rel == "bin" || rel == "bench/results") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("only %d files found from %s: not the repository root?", len(files), "..")
	}
	return files
}

// The documents of the sessions' shared reference folder, outside the
// repository: no file may cite them (the words are split so that this file
// does not cite them either).
var outside = []string{"sdk-wire" + "-behavior", "shared/" + "reference"}

// architectureOutsideDocs is a citation of architecture.md not under docs/.
var architectureOutsideDocs = regexp.MustCompile(`(^|[^/\w-])architecture\.md|\.\./architecture\.md`)

// TestNoCitationOutsideRepo: no .go or .md file cites a document that is not
// in the repository.
func TestNoCitationOutsideRepo(t *testing.T) {
	for name, text := range repoFiles(t) {
		for i, line := range strings.Split(text, "\n") {
			for _, o := range outside {
				if strings.Contains(line, o) {
					t.Errorf("%s:%d cites %q, not in the repository: cite docs/ instead", name, i+1, o)
				}
			}
			if strings.HasPrefix(name, "docs/") {
				continue // docs/ names its own architecture.md
			}
			if architectureOutsideDocs.MatchString(line) {
				t.Errorf("%s:%d cites architecture.md: the repository's is docs/architecture.md", name, i+1)
			}
		}
	}
}

// docCitation is docs/<name>.md in a comment, with the section it names
// when one follows in quotes (`docs/sdk-wire.md, "Local mode"`).
var docCitation = regexp.MustCompile(`docs/([\w-]+)\.md(?:,\s*"([^"]+)")?`)

// commentText joins a Go file's comment lines (// text, the markers and
// the indentation removed) with spaces, so a citation wrapped over two
// lines reads as one.
func commentText(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		_, c, ok := strings.Cut(line, "//")
		if !ok {
			b.WriteString("\n")
			continue
		}
		b.WriteString(strings.TrimSpace(c))
		b.WriteString(" ")
	}
	return b.String()
}

// headings are the "## " and "### " titles of a markdown text.
func headings(md string) map[string]bool {
	h := map[string]bool{}
	for _, line := range strings.Split(md, "\n") {
		if t, ok := strings.CutPrefix(line, "## "); ok {
			h[strings.TrimSpace(t)] = true
		} else if t, ok := strings.CutPrefix(line, "### "); ok {
			h[strings.TrimSpace(t)] = true
		}
	}
	return h
}

// TestCitedDocsExist: every docs/<name>.md a Go comment cites exists, and a
// section it names in quotes is one of that document's headings.
func TestCitedDocsExist(t *testing.T) {
	files := repoFiles(t)
	cited := 0
	for name, src := range files {
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		for _, m := range docCitation.FindAllStringSubmatch(commentText(src), -1) {
			cited++
			doc := "docs/" + m[1] + ".md"
			md, ok := files[doc]
			if !ok {
				t.Errorf("%s cites %s, which does not exist", name, doc)
				continue
			}
			if m[2] != "" && !headings(md)[m[2]] {
				t.Errorf("%s cites %s, %q: no such section", name, doc, m[2])
			}
		}
	}
	if cited == 0 {
		t.Fatal("no docs/ citation found: the pattern is wrong")
	}
}

// mdLink is a link to a neighbouring document in docs/*.md: (name.md) or
// (name.md#anchor).
var mdLink = regexp.MustCompile(`\]\(([\w-]+\.md)(#[\w-]*)?\)`)

// TestDocsLinksExist: the links between docs/*.md lead to files in docs/.
func TestDocsLinksExist(t *testing.T) {
	for name, md := range repoFiles(t) {
		if !strings.HasPrefix(name, "docs/") || !strings.HasSuffix(name, ".md") {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(md, -1) {
			if _, err := os.Stat(m[1]); err != nil {
				t.Errorf("%s links %s: %v", name, m[1], err)
			}
		}
	}
}
