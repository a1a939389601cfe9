// Package ed25519cmp measures crypto/ed25519's verify against
// curve25519-voi's under the standard library's rules, the one the sidecar
// uses (grants/ed25519.go; bench/README.md, "D's floor, and what it would
// take"). The differential test of the two is grants'
// TestVerifyAgreesWithStdlib, run by make test. Run this with
// `cd bench/ed25519cmp && go test -bench .`.
package ed25519cmp

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// BenchmarkVerify verifies one signature of a 400-byte message (a workspace
// token's signing input is about that long) with Go's crypto/ed25519 and
// with curve25519-voi under the standard library's verification rules
// (VerifyOptionsStdLib), with the public key as bytes and expanded once.
func BenchmarkVerify(b *testing.B) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, 400)
	sig := ed25519.Sign(priv, msg)
	opts := &voi.Options{Verify: voi.VerifyOptionsStdLib}
	expanded, err := voi.NewExpandedPublicKey(voi.PublicKey(pub))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		verify func() bool
	}{
		{"stdlib", func() bool { return ed25519.Verify(pub, msg, sig) }},
		{"voi_stdlib_rules", func() bool { return voi.VerifyWithOptions(voi.PublicKey(pub), msg, sig, opts) }},
		{"voi_stdlib_rules_expanded_key", func() bool { return voi.VerifyExpandedWithOptions(expanded, msg, sig, opts) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if !c.verify() {
					b.Fatal("signature refused")
				}
			}
		})
	}
}
