// The Ed25519 signature check of every token the cache does not hold:
// curve25519-voi under the standard library's verification rules
// (VerifyOptionsStdLib), about twice as fast as crypto/ed25519 and accepting
// exactly the signatures crypto/ed25519 accepts (TestVerifyAgreesWithStdlib,
// run by make test, holds it: random keys and messages, bit flips, S + L,
// small-order and non-canonical encodings). docs/architecture.md, "Request
// order", step 5.

package grants

import (
	"crypto/ed25519"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/golang-jwt/jwt/v5"
	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// voiOptions are the standard library's rules: a signature crypto/ed25519
// refuses is refused (not voi's default ZIP-215 rules, which accept more).
var voiOptions = &voi.Options{Verify: voi.VerifyOptionsStdLib}

// edDSA is golang-jwt's EdDSA method with the verify done by verifyEd25519.
// It is registered under "EdDSA" for the parsing of this process (the
// verifier's parser takes that alg only); signing stays crypto/ed25519's.
type edDSA struct{}

func init() {
	jwt.RegisterSigningMethod(jwt.SigningMethodEdDSA.Alg(), func() jwt.SigningMethod { return edDSA{} })
}

func (edDSA) Alg() string { return jwt.SigningMethodEdDSA.Alg() }

func (edDSA) Sign(signingString string, key any) ([]byte, error) {
	return jwt.SigningMethodEdDSA.Sign(signingString, key)
}

// Verify answers as golang-jwt's own EdDSA method does: the key's type,
// its size, then the signature.
func (edDSA) Verify(signingString string, sig []byte, key any) error {
	pub, ok := key.(ed25519.PublicKey)
	if !ok {
		return jwt.ErrInvalidKeyType
	}
	if len(pub) != ed25519.PublicKeySize {
		return jwt.ErrInvalidKey
	}
	if !verifyEd25519(pub, []byte(signingString), sig) {
		return jwt.ErrEd25519Verification
	}
	return nil
}

// verifyEd25519 is crypto/ed25519.Verify's answer, computed by voi with
// pub expanded once (expandedKey): a key voi cannot expand (not a point)
// goes through voi's plain verify, which refuses it as the standard
// library does.
func verifyEd25519(pub ed25519.PublicKey, msg, sig []byte) bool {
	if k := expandedKey(pub); k != nil {
		return voi.VerifyExpandedWithOptions(k, msg, sig, voiOptions)
	}
	return voi.VerifyWithOptions(voi.PublicKey(pub), msg, sig, voiOptions)
}

// maxExpandedKeys bounds the expanded keys kept (about 1.5 KiB each).
// The keys verified are the verifier's own, from its PEM or its JWKS
// documents, never a token's: a few. Past the bound (keys rotated many
// times over) the set starts again empty.
const maxExpandedKeys = 64

// expanded holds the expanded form of the keys verified so far, by their
// 32 bytes: a map read without a lock and replaced whole when a key is
// added (a copy of at most maxExpandedKeys entries, once per key).
var expanded struct {
	keys atomic.Pointer[map[[ed25519.PublicKeySize]byte]*voi.ExpandedPublicKey]
	mu   sync.Mutex // serialises the replacements
}

// expandedKey returns pub (ed25519.PublicKeySize bytes) expanded for
// repeated verification (the point decompressed and its table computed:
// about 5 µs saved a verify), or nil when it is not a valid point
// encoding. The expansion depends on the key's bytes only, so keying it
// by them cannot hand one key's expansion to another.
func expandedKey(pub ed25519.PublicKey) *voi.ExpandedPublicKey {
	if len(pub) != ed25519.PublicKeySize {
		return nil
	}
	id := [ed25519.PublicKeySize]byte(pub)
	if m := expanded.keys.Load(); m != nil {
		if k, ok := (*m)[id]; ok {
			return k
		}
	}
	k, err := voi.NewExpandedPublicKey(voi.PublicKey(pub))
	if err != nil {
		return nil
	}
	expanded.mu.Lock()
	defer expanded.mu.Unlock()
	next := make(map[[ed25519.PublicKeySize]byte]*voi.ExpandedPublicKey, maxExpandedKeys)
	if m := expanded.keys.Load(); m != nil && len(*m) < maxExpandedKeys {
		maps.Copy(next, *m)
	}
	next[id] = k
	expanded.keys.Store(&next)
	return k
}
