package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// `supervaizer keygen`: an Ed25519 signing key pair for local testing, its
// public JWK and a JWKS holding it.

// Names of the files keygen writes.
const (
	keygenPrivateFile = "studio-signing.key"
	keygenPublicFile  = "studio-signing.pub"
	keygenJWKFile     = "studio-signing.jwk.json"
	keygenJWKSFile    = "jwks.json"
)

func keygenCobra() *cobra.Command {
	c := &cobra.Command{
		Use:   "keygen --out <dir> [--kid <kid>] [--force]",
		Short: "Writes an Ed25519 signing key pair, its public JWK and a JWKS",
		Args:  cobra.NoArgs,
	}
	c.Flags().String("out", "", "Directory to write the key files to (created if missing)")
	c.Flags().String("kid", "", "Key id (default: RFC 7638 JWK thumbprint)")
	c.Flags().Bool("force", false, "Overwrite existing key files")
	c.RunE = wrap(cmdKeygen)
	return c
}

func cmdKeygen(fs caddycmd.Flags, stdout, stderr io.Writer) (int, error) {
	dir := strings.TrimSpace(fs.String("out"))
	if dir == "" {
		return caddy.ExitCodeFailedStartup, errors.New("keygen: --out <dir> is required")
	}
	force := fs.Bool("force")
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("keygen: %w", err)
	}
	kid := strings.TrimSpace(fs.String("kid"))
	if kid == "" {
		kid = jwkThumbprint(pub)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("keygen: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("keygen: %w", err)
	}
	jwk := publicJWK(pub, kid)
	jwkJSON, _ := json.MarshalIndent(jwk, "", "  ")
	jwksJSON, _ := json.MarshalIndent(map[string]any{"keys": []any{jwk}}, "", "  ")

	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{keygenPrivateFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600},
		{keygenPublicFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644},
		{keygenJWKFile, append(jwkJSON, '\n'), 0o644},
		{keygenJWKSFile, append(jwksJSON, '\n'), 0o644},
	}
	if !force {
		var existing []string
		for _, f := range files {
			p := filepath.Join(dir, f.name)
			if _, err := os.Lstat(p); err == nil {
				existing = append(existing, p)
			}
		}
		if len(existing) > 0 {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("keygen: refusing to overwrite %s (use --force)", strings.Join(existing, ", "))
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("keygen: %w", err)
	}
	var written []string
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := writeKeyFile(p, f.data, f.mode, force); err != nil {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("keygen: %w (already written: %v)", err, written)
		}
		written = append(written, p)
	}
	for _, p := range written {
		fmt.Fprintln(stdout, p)
	}
	fmt.Fprintf(stderr, "kid %s\n", kid)
	return 0, nil
}

// writeKeyFile writes data to path with exactly mode. Without force it never
// replaces an existing file (O_EXCL); with force it replaces it atomically.
func writeKeyFile(path string, data []byte, mode os.FileMode, force bool) error {
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		if err := f.Chmod(mode); err != nil { // the umask must not loosen or tighten it
			f.Close()
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// publicJWK is the public JWK of an Ed25519 key, in the members' usual order.
type jwkPublic struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

func publicJWK(pub ed25519.PublicKey, kid string) jwkPublic {
	return jwkPublic{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(pub), Kid: kid, Alg: "EdDSA", Use: "sig"}
}

// jwkThumbprint is the RFC 7638 thumbprint of an Ed25519 public key
// (RFC 8037 §2: the required members crv, kty, x in lexical order).
func jwkThumbprint(pub ed25519.PublicKey) string {
	canonical := `{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}`
	sum := sha256.Sum256([]byte(canonical))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
