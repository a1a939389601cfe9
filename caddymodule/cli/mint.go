package cli

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"

	"github.com/supervaize/supervaizer-sidecar/caddymodule"
	"github.com/supervaize/supervaizer-sidecar/grants"
)

// `supervaizer mint`: a dev-only workspace authorization token, signed with
// a key from keygen.

// Defaults of mint.
const (
	mintDefaultIssuer = "https://studio.supervaize.com"
	mintDefaultTTL    = "10m"
)

func mintCobra() *cobra.Command {
	c := &cobra.Command{
		Use:   "mint --dev --key <private PEM> --grant <id> --workspace <id> --agent-slug <slug> --agent-id <id> --server-id <id> --scope <scope>...",
		Short: "Prints a dev workspace authorization token (local testing only)",
		Args:  cobra.NoArgs,
	}
	f := c.Flags()
	f.Bool("dev", false, "Confirm the token is for local testing only (required)")
	f.String("key", "", "Ed25519 private key file (PKCS#8 PEM, e.g. from keygen)")
	f.String("grant", "", "Grant id (grant_id; sub is workspace-agent-grant:<id>)")
	f.String("workspace", "", "Studio workspace id (workspace_id)")
	f.String("workspace-slug", "", "Workspace slug (workspace_slug, informational)")
	f.String("agent-slug", "", "Agent slug (agent_slug)")
	f.String("agent-id", "", "Studio agent id (agent_id)")
	f.String("server-id", "", "Studio server id (server_id)")
	f.StringArray("scope", nil, "Granted scope; repeat the flag or give a comma separated list")
	f.String("ttl", mintDefaultTTL, "Token lifetime from iat (exp = iat + ttl); negative for an already expired token, e.g. -5m")
	f.String("iat", "", "Issued-at: unix seconds, RFC 3339, or a duration from now such as +10m (default now); in the future for a not-yet-valid token")
	f.String("exp", "", "Expiry: unix seconds, RFC 3339, or a duration from now such as -5m (default iat + ttl)")
	f.String("nbf", "", "Not-before (nbf, absent by default): unix seconds, RFC 3339, or a duration from now")
	f.String("issuer", "", "Issuer (iss; default $SUPERVAIZER_WORKSPACE_AUTH_ISSUER, else "+mintDefaultIssuer+")")
	f.String("audience", "", "Audience (aud; default supervaizer-server:<server-id>)")
	f.String("kid", "", "Key id header (default: RFC 7638 thumbprint of the key, as keygen)")
	f.String("agent-workspace-ref", "", "Agent-side workspace reference (agent_workspace_ref)")
	c.RunE = wrap(cmdMint)
	return c
}

func cmdMint(fs caddycmd.Flags, stdout, stderr io.Writer) (int, error) {
	if !fs.Bool("dev") {
		return caddy.ExitCodeFailedStartup, errors.New("mint: dev tokens are for local testing only; pass --dev to confirm (Studio mints the real tokens)")
	}
	get := func(name string) string { return strings.TrimSpace(fs.String(name)) }
	scopes, err := mintRequired(fs, get)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	times, err := mintTimes(get("ttl"), get("iat"), get("exp"), get("nbf"), time.Now())
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("mint: %w", err)
	}
	priv, err := loadPrivateKey(get("key"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("mint: --key: %w", err)
	}
	claims, err := mintClaims(get, scopes, times)
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("mint: %w", err)
	}
	kid := get("kid")
	if kid == "" {
		kid = jwkThumbprint(priv.Public().(ed25519.PublicKey))
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = kid
	signed, err := tok.SignedString(priv)
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("mint: signing: %w", err)
	}
	fmt.Fprintln(stdout, signed)
	times.note(stderr, time.Now().Unix())
	return 0, nil
}

// mintRequired returns the scopes (repeated or comma-separated --scope
// flags, each once) and refuses, naming every one, the required flags
// left out.
func mintRequired(fs caddycmd.Flags, get func(string) string) ([]string, error) {
	var scopes []string
	raw, _ := fs.GetStringArray("scope")
	for _, r := range raw {
		for _, s := range strings.Split(r, ",") {
			if s = strings.TrimSpace(s); s != "" && !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
	}
	var missing []string
	for _, name := range []string{"key", "grant", "workspace", "agent-slug", "agent-id", "server-id"} {
		if get(name) == "" {
			missing = append(missing, "--"+name)
		}
	}
	if len(scopes) == 0 {
		missing = append(missing, "--scope")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("mint: missing required flags: %s", strings.Join(missing, ", "))
	}
	return scopes, nil
}

// mintClaims are the token's claims from the flags: the issuer defaults to
// $SUPERVAIZER_WORKSPACE_AUTH_ISSUER, then mintDefaultIssuer; the audience
// to supervaizer-server:<server-id>; a random jti; "dev": true.
func mintClaims(get func(string) string, scopes []string, times mintClaimsTimes) (jwt.MapClaims, error) {
	issuer := get("issuer")
	if issuer == "" {
		issuer = strings.TrimSpace(os.Getenv(caddymodule.EnvWorkspaceAuthIssuer))
	}
	if issuer == "" {
		issuer = mintDefaultIssuer
	}
	serverID := get("server-id")
	audience := get("audience")
	if audience == "" {
		audience = grants.AudiencePrefix + serverID
	}
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return nil, err
	}
	claims := jwt.MapClaims{
		"iss": issuer, "aud": audience, "sub": "workspace-agent-grant:" + get("grant"),
		"grant_id": get("grant"), "workspace_id": get("workspace"), "agent_id": get("agent-id"),
		"agent_slug": get("agent-slug"), "server_id": serverID, "scopes": scopes,
		"iat": times.iat, "exp": times.exp, "jti": base64.RawURLEncoding.EncodeToString(jti), "dev": true,
	}
	if times.nbf != nil {
		claims["nbf"] = *times.nbf
	}
	if v := get("workspace-slug"); v != "" {
		claims["workspace_slug"] = v
	}
	if v := get("agent-workspace-ref"); v != "" {
		claims["agent_workspace_ref"] = v
	}
	return claims, nil
}

// note tells, on stderr, that a token is already expired or not yet valid
// at now (unix seconds): made for testing refusals.
func (t mintClaimsTimes) note(stderr io.Writer, now int64) {
	if t.exp < now {
		fmt.Fprintf(stderr, "note: this token expired %ds ago (a verifier with 30 s leeway refuses it after exp + 30 s)\n", now-t.exp)
	}
	if t.iat > now {
		fmt.Fprintf(stderr, "note: this token is issued %ds in the future (refused as not yet valid beyond the leeway)\n", t.iat-now)
	}
}

// mintClaimsTimes are the time claims of a minted token, in unix seconds.
type mintClaimsTimes struct {
	iat, exp int64
	nbf      *int64
}

// mintTimes resolves mint's --ttl, --iat, --exp and --nbf flags against now:
// iat defaults to now, exp to iat + ttl, nbf to absent. ttl is a Caddy
// duration (may be negative: an expired token); the others are parsed by
// parseMintTime. Errors name the flag.
func mintTimes(ttlFlag, iatFlag, expFlag, nbfFlag string, now time.Time) (mintClaimsTimes, error) {
	var t mintClaimsTimes
	ttl, err := caddy.ParseDuration(ttlFlag)
	if err != nil {
		return t, fmt.Errorf("--ttl must be a duration such as 10m or -5m, not %q", ttlFlag)
	}
	t.iat = now.Unix()
	if iatFlag != "" {
		if t.iat, err = parseMintTime(iatFlag, now); err != nil {
			return t, fmt.Errorf("--iat: %w", err)
		}
	}
	t.exp = t.iat + int64(ttl/time.Second)
	if expFlag != "" {
		if t.exp, err = parseMintTime(expFlag, now); err != nil {
			return t, fmt.Errorf("--exp: %w", err)
		}
	}
	if nbfFlag != "" {
		nbf, err := parseMintTime(nbfFlag, now)
		if err != nil {
			return t, fmt.Errorf("--nbf: %w", err)
		}
		t.nbf = &nbf
	}
	return t, nil
}

// parseMintTime reads a time for mint: unix seconds ("1767225600"), RFC 3339
// ("2026-01-01T00:00:00Z"), or a signed duration from now ("+10m", "-5m").
func parseMintTime(s string, now time.Time) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	if ts, err := time.Parse(time.RFC3339, s); err == nil {
		return ts.Unix(), nil
	}
	if s[0] == '+' || s[0] == '-' {
		if d, err := caddy.ParseDuration(s); err == nil {
			return now.Add(d).Unix(), nil
		}
	}
	return 0, fmt.Errorf("%q is not unix seconds, RFC 3339 or a duration from now such as +10m", s)
}

// loadPrivateKey reads an Ed25519 private key from a PKCS#8 PEM file.
func loadPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(bytes.TrimSpace(data))
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block found", path)
	}
	if block.Type == "PUBLIC KEY" {
		return nil, fmt.Errorf("%s is a public key: mint signs with the private key (keygen's studio-signing.key)", path)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: not a PKCS#8 private key (PEM block %q)", path, block.Type)
	}
	edKey, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: key is %T, not Ed25519", path, key)
	}
	return edKey, nil
}
