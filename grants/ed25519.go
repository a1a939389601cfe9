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

// verifyEd25519 is crypto/ed25519.Verify's answer, computed by voi.
func verifyEd25519(pub ed25519.PublicKey, msg, sig []byte) bool {
	return voi.VerifyWithOptions(voi.PublicKey(pub), msg, sig, voiOptions)
}
