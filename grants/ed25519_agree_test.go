package grants

import (
	"crypto/ed25519"
	"encoding/hex"
	"math/big"
	"math/rand/v2"
	"testing"
)

// smallOrder are encodings of points of small order, canonical and not
// (y >= p), the inputs where Ed25519 implementations are known to differ.
var smallOrder = []string{
	"0100000000000000000000000000000000000000000000000000000000000000",
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"0000000000000000000000000000000000000000000000000000000000000000",
	"0000000000000000000000000000000000000000000000000000000000000080",
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
	"0100000000000000000000000000000000000000000000000000000000000080",
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
}

// TestVerifyAgreesWithStdlib: verifyEd25519 (curve25519-voi under
// VerifyOptionsStdLib, the verify of every uncached token) accepts exactly
// what crypto/ed25519 accepts: valid signatures, the same
// signatures with a bit flipped anywhere (key, message, signature), S
// replaced by S + L (a malleated signature), and keys and R values of small
// order, canonical or not. Whoever adopts a faster verify needs at least
// this (grants/ed25519.go).
func TestVerifyAgreesWithStdlib(t *testing.T) {
	check := func(pub, msg, sig []byte) {
		t.Helper()
		want := len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, msg, sig)
		if got := len(pub) == ed25519.PublicKeySize && verifyEd25519(pub, msg, sig); got != want {
			t.Fatalf("pub %x msg %x sig %x: voi %v, stdlib %v", pub, msg, sig, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	l, _ := new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
	for i := range 2000 {
		seed := make([]byte, ed25519.SeedSize)
		for j := range seed {
			seed[j] = byte(rng.Uint32())
		}
		priv := ed25519.NewKeyFromSeed(seed)
		pub := priv.Public().(ed25519.PublicKey)
		msg := make([]byte, rng.IntN(600))
		for j := range msg {
			msg[j] = byte(rng.Uint32())
		}
		sig := ed25519.Sign(priv, msg)
		check(pub, msg, sig)
		for _, b := range [][]byte{pub, sig, msg} {
			if len(b) == 0 {
				continue
			}
			k := rng.IntN(len(b) * 8)
			b[k/8] ^= 1 << (k % 8)
			check(pub, msg, sig)
			b[k/8] ^= 1 << (k % 8)
		}
		// S + L, little-endian.
		s := new(big.Int).SetBytes(reverse(sig[32:]))
		s.Add(s, l)
		if sb := s.FillBytes(make([]byte, 32)); i%2 == 0 {
			m := append(append([]byte{}, sig[:32]...), reverse(sb)...)
			check(pub, msg, m)
		}
	}
	msg := []byte("small order")
	for _, a := range smallOrder {
		for _, r := range smallOrder {
			pub, _ := hex.DecodeString(a)
			rb, _ := hex.DecodeString(r)
			check(pub, msg, append(rb, make([]byte, 32)...))
		}
	}
}

func reverse(b []byte) []byte {
	out := make([]byte, len(b))
	for i := range b {
		out[len(b)-1-i] = b[i]
	}
	return out
}
