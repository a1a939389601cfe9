package strictjson

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestScratchKeptBounded: a scan of a document whose keys outgrow
// keepScratch (a table of 300 K keys, one key with an escape of 2 MiB in a
// small object and one in a read object with a table, folded) gives its
// scratch back to its pool with no buffer over keepScratch bytes: what the
// pool keeps after one giant body is bounded, not the giant's buffers.
func TestScratchKeptBounded(t *testing.T) {
	long := `\n` + strings.Repeat("x", 2<<20)
	var sb strings.Builder
	sb.WriteString(`{"a":{"` + long + `":0},"b":{`)
	for i := range 300_000 {
		fmt.Fprintf(&sb, `"k%d":0,`, i)
	}
	sb.WriteString(`"` + long + `":1}}`)
	doc := []byte(sb.String())
	schema := NewSchema([]string{"b.c"})
	spans := make([]Span, schema.Len())

	var taken []*scratch[uint32]
	pool := &sync.Pool{New: func() any {
		sc := new(scratch[uint32])
		taken = append(taken, sc)
		return sc
	}}
	if f := scan[uint32](doc, MaxDepth, schema, spans, pool); !f.OK() {
		t.Fatalf("%+v", f)
	}
	if len(taken) != 1 {
		t.Fatalf("the scan took %d scratches, want 1", len(taken))
	}
	sc := taken[0]
	for _, b := range []struct {
		name  string
		bytes int
	}{
		{"keys", cap(sc.keys) * 8},
		{"unescaped", cap(sc.unescaped)},
		{"slots", cap(sc.tables.slots) * 8},
		{"held", cap(sc.tables.held) * 8},
		{"old", cap(sc.tables.old) * 8},
		{"fold", cap(sc.tables.fold)},
		{"cmp", cap(sc.tables.cmp)},
	} {
		if b.bytes > keepScratch {
			t.Errorf("the pool keeps %s of %d bytes, over keepScratch (%d)", b.name, b.bytes, keepScratch)
		}
	}
}
