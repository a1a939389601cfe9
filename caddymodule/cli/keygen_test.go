package cli

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/MicahParks/jwkset"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

func TestCommandKeygenWritesKeyFiles(t *testing.T) {
	cmdTestClearEnv(t)
	dir := filepath.Join(t.TempDir(), "new", "keys")
	stdout, _, err := cmdTestRun(t, "keygen", "--out", dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(dir, "studio-signing.key"), filepath.Join(dir, "studio-signing.pub"),
		filepath.Join(dir, "studio-signing.jwk.json"), filepath.Join(dir, "jwks.json"),
	}
	if got := strings.Fields(stdout); !slices.Equal(got, want) {
		t.Fatalf("printed %q, want the paths %q", got, want)
	}
	modes := []os.FileMode{0o600, 0o644, 0o644, 0o644}
	for i, p := range want {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != modes[i] {
			t.Errorf("%s: mode %o, want %o", p, fi.Mode().Perm(), modes[i])
		}
	}

	privPEM, _ := os.ReadFile(want[0])
	block, _ := pem.Decode(privPEM)
	if block == nil || block.Type != "PRIVATE KEY" {
		t.Fatalf("private key file is not a PRIVATE KEY PEM: %s", privPEM)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		t.Fatalf("private key is %T", k)
	}
	pub, err := grants.LoadPublicKey(want[1])
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public()) {
		t.Fatal("public key file does not match the private key")
	}

	var jwk map[string]string
	cmdTestReadJSON(t, want[2], &jwk)
	x, err := base64.RawURLEncoding.DecodeString(jwk["x"])
	if err != nil || !bytes.Equal(x, pub) {
		t.Fatalf("JWK x %q does not encode the public key", jwk["x"])
	}
	wantJWK := map[string]string{"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig",
		"x": jwk["x"], "kid": jwkThumbprint(pub)}
	if fmt.Sprint(jwk) != fmt.Sprint(wantJWK) {
		t.Fatalf("JWK %v, want %v", jwk, wantJWK)
	}

	var jwks struct{ Keys []map[string]string }
	cmdTestReadJSON(t, want[3], &jwks)
	if len(jwks.Keys) != 1 || fmt.Sprint(jwks.Keys[0]) != fmt.Sprint(jwk) {
		t.Fatalf("jwks.json %v does not hold exactly the JWK", jwks.Keys)
	}
	// The JWKS parses with the library the verifier uses, to the same key.
	var set jwkset.JWKSMarshal
	cmdTestReadJSON(t, want[3], &set)
	keys, err := set.JWKSlice()
	if err != nil || len(keys) != 1 {
		t.Fatalf("jwkset: %v", err)
	}
	if got, ok := keys[0].Key().(ed25519.PublicKey); !ok || !got.Equal(pub) || keys[0].Marshal().KID != jwk["kid"] {
		t.Fatalf("jwkset reads %T kid %q", keys[0].Key(), keys[0].Marshal().KID)
	}
}

func TestCommandKeygenRefusesOverwriteUnlessForce(t *testing.T) {
	cmdTestClearEnv(t)
	dir := cmdTestKeygen(t)
	keyPath := filepath.Join(dir, "studio-signing.key")
	before, _ := os.ReadFile(keyPath)

	_, _, err := cmdTestRun(t, "keygen", "--out", dir)
	if err == nil || !strings.Contains(err.Error(), "refusing to overwrite") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second keygen: %v, want a refusal naming --force", err)
	}
	if after, _ := os.ReadFile(keyPath); !bytes.Equal(before, after) {
		t.Fatal("refused keygen changed the private key")
	}

	if _, _, err := cmdTestRun(t, "keygen", "--out", dir, "--force", "--kid", "studio-2026"); err != nil {
		t.Fatalf("keygen --force: %v", err)
	}
	if after, _ := os.ReadFile(keyPath); bytes.Equal(before, after) {
		t.Fatal("keygen --force kept the old key")
	}
	if fi, _ := os.Stat(keyPath); fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode %o after --force", fi.Mode().Perm())
	}
	var jwk map[string]string
	cmdTestReadJSON(t, filepath.Join(dir, "studio-signing.jwk.json"), &jwk)
	if jwk["kid"] != "studio-2026" {
		t.Fatalf("kid %q, want the --kid value", jwk["kid"])
	}
}

// TestCommandJWKThumbprint checks the RFC 8037 appendix A.3 example.
func TestCommandJWKThumbprint(t *testing.T) {
	x, _ := base64.RawURLEncoding.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	if got := jwkThumbprint(x); got != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Fatalf("thumbprint %s", got)
	}
}
