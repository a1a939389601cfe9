package grants

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

const (
	benchIssuer   = "https://studio.bench"
	benchServerID = "srv-bench"
	benchAgentID  = "studio-agent-1"
)

var benchScopes = []string{"supervaizer/action.invoke", "supervaizer/surface.load", "job.start", "job.sync",
	"job.start.form", "resource.contacts.list", "resource.contacts.create"}

// benchKey is one Ed25519 key pair for the benchmarks of this file.
type benchKey struct {
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
}

func newBenchKey(b *testing.B) benchKey {
	b.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	return benchKey{pub: pub, priv: priv}
}

// benchTokenClaims are the claims of a valid token for the fixture's
// job.start, as the end-to-end tests mint them; jti makes each token distinct.
func benchTokenClaims(jti string) jwt.MapClaims {
	now := time.Now().Unix()
	scopes := make([]any, len(benchScopes))
	for i, s := range benchScopes {
		scopes[i] = s
	}
	return jwt.MapClaims{
		"iss": benchIssuer, "aud": AudiencePrefix + benchServerID, "sub": "workspace-agent-grant:grant-1",
		"grant_id": "grant-1", "workspace_id": "workspace_123", "workspace_slug": "acme",
		"agent_id": benchAgentID, "agent_slug": "agent_interviewer", "server_id": benchServerID,
		"scopes": scopes, "agent_workspace_ref": "agent-ws-1",
		"iat": now, "exp": now + 3600, "jti": jti,
	}
}

func (k benchKey) mint(b *testing.B, jti string) string {
	b.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, benchTokenClaims(jti)).SignedString(k.priv)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func newBenchVerifier(b *testing.B, pub ed25519.PublicKey, cacheSize int) *Verifier {
	b.Helper()
	v, err := NewVerifier(Config{Issuer: benchIssuer, ServerID: benchServerID, PublicKey: pub, CacheSize: cacheSize})
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkVerify measures Verify on its own:
//   - bare_ed25519: the signature check uncached makes (verifyEd25519,
//     curve25519-voi under the standard library's rules) alone on the same
//     kind of token, the floor of uncached (uncached - bare_ed25519 is what
//     the parse, the claims model and the cache cost above it);
//   - bare_voi_unexpanded: the same verify without the expanded key
//     (the key decompressed on every call), for reference;
//   - bare_stdlib: crypto/ed25519.Verify on the same inputs, for reference;
//   - cached: one valid token, answered by the verified-token cache;
//   - again: the same token checked a second time in one request
//     (VerifyAgain: no hash, no cache lookup);
//   - uncached: a pool of distinct valid tokens twice the cache size, used in
//     turn, so every call misses (signature check, claims, cache insert and
//     eviction);
//   - bad_signature: tokens signed by another key (never cached).
func BenchmarkVerify(b *testing.B) {
	ctx := context.Background()
	key, other := newBenchKey(b), newBenchKey(b)
	b.Run("cached", func(b *testing.B) {
		v := newBenchVerifier(b, key.pub, 0)
		tok := key.mint(b, "jti-cached")
		if _, err := v.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
		verify := func() {
			if _, err := v.Verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			verify()
		}
		allocBudget(b, 0, verify) // hashed without a heap copy
	})
	b.Run("again", func(b *testing.B) {
		v := newBenchVerifier(b, key.pub, 0)
		tok := key.mint(b, "jti-again")
		first, err := v.VerifyOnce(ctx, tok, VerifyOptions{})
		if err != nil {
			b.Fatal(err)
		}
		again := func() {
			if _, err := v.VerifyAgain(ctx, tok, first, VerifyOptions{Unobserved: true}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			again()
		}
		allocBudget(b, 0, again)
	})
	b.Run("uncached", func(b *testing.B) {
		const cache = 256
		v := newBenchVerifier(b, key.pub, cache)
		pool := make([]string, 2*cache)
		for i := range pool {
			pool[i] = key.mint(b, "jti-"+strconv.Itoa(i))
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := v.Verify(ctx, pool[i%len(pool)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	// The floor of uncached: the signature check alone over the same
	// tokens' signing inputs and signatures (decoded beforehand). make
	// bench's D target is D above B <= 1.3 x bare_ed25519 + 15 µs.
	const n = 512
	msgs, sigs := make([][]byte, n), make([][]byte, n)
	for i := range msgs {
		tok := key.mint(b, "jti-"+strconv.Itoa(i))
		dot := strings.LastIndexByte(tok, '.')
		sig, err := base64.RawURLEncoding.DecodeString(tok[dot+1:])
		if err != nil {
			b.Fatal(err)
		}
		msgs[i], sigs[i] = []byte(tok[:dot]), sig
	}
	for _, bare := range []struct {
		name   string
		verify func(ed25519.PublicKey, []byte, []byte) bool
	}{
		{"bare_ed25519", verifyEd25519},
		{"bare_voi_unexpanded", func(pub ed25519.PublicKey, msg, sig []byte) bool {
			return voi.VerifyWithOptions(voi.PublicKey(pub), msg, sig, voiOptions)
		}},
		{"bare_stdlib", ed25519.Verify},
	} {
		b.Run(bare.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !bare.verify(key.pub, msgs[i%n], sigs[i%n]) {
					b.Fatal("signature does not verify")
				}
				i++
			}
		})
	}
	b.Run("bad_signature", func(b *testing.B) {
		v := newBenchVerifier(b, key.pub, 0)
		tok := other.mint(b, "jti-bad")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(ctx, tok); err == nil {
				b.Fatal("bad signature accepted")
			}
		}
	})
}

// benchCacheInsert puts one verified entry into v's cache exactly as Verify
// leaves it: a fresh *Claims from claimsModel over a fresh claims segment
// (its strings are substrings of the segment's one copy, as Verify's are),
// keyed by the SHA-256 of a distinct token.
func benchCacheInsert(b *testing.B, v *Verifier, i int, until time.Time) {
	jti := "jti-" + strconv.Itoa(i)
	m := map[string]any{
		"iss": benchIssuer, "aud": AudiencePrefix + benchServerID,
		"sub": "workspace-agent-grant:grant-" + strconv.Itoa(i), "grant_id": "grant-" + strconv.Itoa(i),
		"workspace_id": "workspace_123", "workspace_slug": "acme",
		"agent_id": benchAgentID, "agent_slug": "agent_interviewer",
		"server_id": benchServerID, "scopes": benchScopes, "agent_workspace_ref": "agent-ws-1",
		"iat": 1800000000, "exp": 1800003600, "jti": jti,
	}
	seg, err := json.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	var tc tokenClaims
	if err := tc.UnmarshalJSON(seg); err != nil {
		b.Fatal(err)
	}
	c, e := claimsModel(&tc)
	if e != nil {
		b.Fatal(e)
	}
	v.cache.Add(sha256.Sum256([]byte("token-"+jti)), cached{claims: c, last: until.Unix()})
}

func benchHeapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkVerifiedTokenCacheMemory measures the heap held by the
// verified-token cache after `inserted` distinct verified tokens, with the
// default bound (cache_size 10,000: an LRU, the oldest entry evicted) and
// with the bound raised to the number inserted (the cost per entry).
// Run with -benchtime 1x; it reports entries kept, heap MiB and bytes/entry.
func BenchmarkVerifiedTokenCacheMemory(b *testing.B) {
	key := newBenchKey(b)
	until := time.Now().Add(time.Hour)
	for _, bound := range []string{"default", "raised"} {
		for _, n := range []int{1_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("bound=%s/inserted=%d", bound, n), func(b *testing.B) {
				for b.Loop() {
					size := 0 // NewVerifier's default, 10,000
					if bound == "raised" {
						size = n
					}
					before := benchHeapAlloc()
					v := newBenchVerifier(b, key.pub, size)
					for i := 0; i < n; i++ {
						benchCacheInsert(b, v, i, until)
					}
					after := benchHeapAlloc()
					kept := v.cache.Len()
					held := float64(after) - float64(before)
					b.ReportMetric(float64(kept), "entries")
					b.ReportMetric(held/(1<<20), "heap-MiB")
					b.ReportMetric(held/float64(kept), "B/entry")
					runtime.KeepAlive(v)
				}
			})
		}
	}
}
