package registration

import (
	"bytes"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

const (
	fixtureCopy   = "testdata/agent_interviewer_mvp_registration.json"
	sharedFixture = "../../shared/fixtures/agent_interviewer_mvp.json"
	fixtureSlug   = "agent_interviewer"
)

// fixtureRaw returns the registration of the shared Agent Interviewer fixture,
// from the package's own copy.
func fixtureRaw(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(fixtureCopy)
	if err != nil {
		t.Fatalf("reading %s: %v", fixtureCopy, err)
	}
	return raw
}

// sharedFixtureRaw returns the "registration" value of the shared fixture
// file, exactly as written there. The shared tree sits beside the repository
// in CI too, so a missing file is a failure.
func sharedFixtureRaw(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(sharedFixture)
	if err != nil {
		// The drift check needs the project's shared folder beside the
		// repository (as in CI); the tests themselves use testdata/.
		t.Skipf("shared fixture not beside the repository, drift not checked: %v", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("decoding %s: %v", sharedFixture, err)
	}
	reg, ok := doc["registration"]
	if !ok {
		t.Fatalf("%s has no registration key", sharedFixture)
	}
	return reg
}

func mustParse(t *testing.T, raw []byte) *Registration {
	t.Helper()
	r, err := Parse(raw)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return r
}

// decodeMap decodes raw into a generic map with numbers kept as written.
func decodeMap(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decoding test document: %v", err)
	}
	return m
}

func encode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encoding test document: %v", err)
	}
	return b
}

// edited returns raw with f applied to its decoded form.
func edited(t *testing.T, raw []byte, f func(m map[string]any)) []byte {
	t.Helper()
	m := decodeMap(t, raw)
	f(m)
	return encode(t, m)
}

func sub(m map[string]any, key string) map[string]any {
	v, ok := m[key].(map[string]any)
	if !ok {
		v = map[string]any{}
		m[key] = v
	}
	return v
}

func list(m map[string]any, key string) []any {
	v, _ := m[key].([]any)
	return v
}

// resourceByID returns the resources entry with that id.
func resourceByID(t *testing.T, m map[string]any, id string) map[string]any {
	t.Helper()
	for _, e := range list(m, "resources") {
		if r := e.(map[string]any); r["id"] == id {
			return r
		}
	}
	t.Fatalf("no resource %q", id)
	return nil
}

// reorderedJSON writes v with object keys in reverse order, odd whitespace
// and every level indented differently: the same document, spelled
// differently.
func reorderedJSON(v any) []byte {
	var b bytes.Buffer
	var write func(v any, depth int)
	write = func(v any, depth int) {
		pad := "\n" + strings.Repeat("\t ", depth)
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Sort(sort.Reverse(sort.StringSlice(keys)))
			b.WriteString("{ ")
			for i, k := range keys {
				if i > 0 {
					b.WriteString(" ,")
				}
				b.WriteString(pad)
				kb, _ := json.Marshal(k)
				b.Write(kb)
				b.WriteString(" :  ")
				write(t[k], depth+1)
			}
			b.WriteString(pad + "}")
		case []any:
			b.WriteString("[")
			for i, e := range t {
				if i > 0 {
					b.WriteString(",\r\n ")
				}
				write(e, depth+1)
			}
			b.WriteString(" ]")
		case json.Number:
			b.WriteString(string(t))
		default:
			vb, _ := json.Marshal(t)
			b.Write(vb)
		}
	}
	write(v, 0)
	b.WriteString("\n\n")
	return b.Bytes()
}

// eventually polls cond until it holds, failing the test after a generous
// deadline. It asserts an outcome, never a duration.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func actionIDs(defs []V2ActionDefinition) []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.ID
	}
	return out
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
