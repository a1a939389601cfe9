package grants

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// TestSHA256String checks that the cache key is exactly the SHA-256 of
// the token's bytes, at every length around the stack buffer and block sizes.
func TestSHA256String(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 255, 256, 257, 511, 512, 513, 800, 4096, MaxTokenBytes} {
		var sb strings.Builder
		for i := 0; i < n; i++ {
			sb.WriteByte(byte('a' + i%26))
		}
		s := sb.String()
		if got, want := SHA256String(s), sha256.Sum256([]byte(s)); got != want {
			t.Fatalf("len %d: SHA256String %x, want %x", n, got, want)
		}
	}
}

// TestVerifyCachedAllocs guards the cached path: a token answered by the
// verified-token cache is hashed without a heap copy.
func TestVerifyCachedAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count")
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, benchTokenClaims("jti-allocs")).SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(Config{Issuer: benchIssuer, ServerID: benchServerID, PublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if c, err := v.Verify(ctx, tok); err != nil || c == nil {
			t.Fatal("cached token not verified")
		}
	})
	if allocs != 0 {
		t.Fatalf("cached Verify: %v allocs/op, want 0", allocs)
	}
}

// BenchmarkSHA256String compares the cache key with the former
// sha256.Sum256([]byte(token)), which copies the token to the heap.
func BenchmarkSHA256String(b *testing.B) {
	tok := newBenchKey(b).mint(b, "jti-key")
	var sum [sha256.Size]byte
	b.Run("SHA256String", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sum = SHA256String(tok)
		}
	})
	b.Run("sum256_copy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sum = sha256.Sum256([]byte(tok))
		}
	})
	_ = sum
}
