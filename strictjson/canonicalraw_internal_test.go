package strictjson

import (
	"bytes"
	"strings"
	"testing"
)

// TestComparePlainKeys: comparePlainKeys (eight bytes at a time) orders
// keys as bytes.Compare does: keys of 0 to 20 bytes of characters around
// '"' (' ', '!', '#'), letters, '~' and a two-byte one, each a prefix of
// the other or not, with the document ending right after them or not.
func TestComparePlainKeys(t *testing.T) {
	alphabet := []string{" ", "!", "#", "a", "b", "~", "é"}
	rnd := uint64(1)
	next := func(n int) int {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		return int(rnd>>33) % n
	}
	key := func() string {
		var sb strings.Builder
		for range next(21) {
			sb.WriteString(alphabet[next(len(alphabet))])
		}
		return sb.String()
	}
	for range 20000 {
		k1 := key()
		k2 := k1[:next(len(k1)+1)] + key() // often a common prefix
		if next(3) == 0 {
			k2 = key()
		}
		for _, tail := range []string{"", `:0,"pad":"xxxxxxxxxxxxxxxx"`} {
			b := []byte(`"` + k1 + `"` + `"` + k2 + `"` + tail)
			x, y := 1, len(k1)+3
			want := bytes.Compare([]byte(k1), []byte(k2))
			if got := comparePlainKeys(b, x, y); got != want {
				t.Fatalf("comparePlainKeys(%q, %q) = %d, want %d", k1, k2, got, want)
			}
			if got := comparePlainKeys(b, y, x); got != -want {
				t.Fatalf("comparePlainKeys(%q, %q) = %d, want %d", k2, k1, got, -want)
			}
		}
	}
}
