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

// TestVerifyCached: a token answered by the verified-token cache verifies
// again, call after call. Its allocation budget (0 allocs/op: hashed
// without a heap copy) is BenchmarkVerify/cached's, in make bench.
func TestVerifyCached(t *testing.T) {
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
	for i := 0; i < 3; i++ {
		if c, err := v.Verify(ctx, tok); err != nil || c == nil {
			t.Fatalf("call %d: cached token not verified: %v", i, err)
		}
	}
}

// allocBudget is an allocation budget of a hot path, checked in make bench
// (not in make test: a Go release may change allocation counts). It reports
// the budget as the budget-allocs/op metric beside allocs/op and fails the
// benchmark when f allocates more on average.
func allocBudget(b *testing.B, budget float64, f func()) {
	b.Helper()
	b.ReportMetric(budget, "budget-allocs/op")
	if got := testing.AllocsPerRun(100, f); got > budget {
		b.Errorf("%v allocs/op, budget %v", got, budget)
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
