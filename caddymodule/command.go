package caddymodule

import (
	"bytes"
	"context"
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
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// The `supervaizer` subcommands of the sidecar binary: keygen (an Ed25519
// signing key pair, its JWK and JWKS), mint (a dev-only workspace token) and
// check (the supervaizer_auth handlers of a config, as start-up would see
// them, plus the checks start-up tolerates).

func init() {
	caddycmd.RegisterCommand(supervaizerCommand())
}

// Names of the files keygen writes.
const (
	keygenPrivateFile = "studio-signing.key"
	keygenPublicFile  = "studio-signing.pub"
	keygenJWKFile     = "studio-signing.jwk.json"
	keygenJWKSFile    = "jwks.json"
)

// Defaults of mint.
const (
	mintDefaultIssuer = "https://studio.supervaize.com"
	mintDefaultTTL    = "10m"
)

// checkFetchTimeout bounds each fetch of check: the JWKS, an agent card.
const checkFetchTimeout = 5 * time.Second

func supervaizerCommand() caddycmd.Command {
	return caddycmd.Command{
		Name:  "supervaizer",
		Usage: "keygen|mint|check [flags]",
		Short: "Supervaizer sidecar tools: signing keys, dev tokens, config check",
		Long: `
Tools for the supervaizer_auth handler.

  supervaizer keygen --out <dir> [--kid <kid>] [--force]
      Writes a new Ed25519 key pair for local testing: studio-signing.key
      (PKCS#8 private key, mode 0600), studio-signing.pub (PKIX public key),
      studio-signing.jwk.json (public JWK) and jwks.json ({"keys":[JWK]}).
      The kid defaults to the RFC 7638 thumbprint of the public key.

  supervaizer mint --dev --key <private PEM> --grant <id> --workspace <id>
      --agent-slug <slug> --agent-id <id> --server-id <id> --scope <scope>...
      [--ttl <dur>] [--iat <time>] [--exp <time>] [--nbf <time>]
      Prints a workspace authorization token signed with the key, marked
      "dev": true. Dev tokens are for local testing only: Studio mints the
      real ones. --ttl may be negative (--ttl -5m: already expired); a time
      is unix seconds, RFC 3339, or a duration from now (--iat +10m: not
      yet valid).

  supervaizer check --config <Caddyfile> [--adapter caddyfile]
      Adapts the config, provisions every supervaizer_auth handler as start-up
      does, fetches each JWKS once, and lists every problem, the warnings
      start-up logs (Caddy's admin endpoint, config autosave, ignored keys)
      and each handler's effective settings after environment resolution
      (secrets as fingerprints, URLs redacted). Exits 1 when there is a
      problem, prints OK otherwise.
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.AddCommand(keygenCobra(), mintCobra(), checkCobra())
		},
	}
}

// wrap runs f with the command's output streams, mapping its result to the
// exit code the way Caddy's own commands do.
func wrap(f func(fs caddycmd.Flags, stdout, stderr io.Writer) (int, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return caddycmd.WrapCommandFuncForCobra(func(fs caddycmd.Flags) (int, error) {
			return f(fs, cmd.OutOrStdout(), cmd.ErrOrStderr())
		})(cmd, args)
	}
}

// ---------------------------------------------------------------- keygen

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

// ---------------------------------------------------------------- mint

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
		return caddy.ExitCodeFailedStartup, fmt.Errorf("mint: missing required flags: %s", strings.Join(missing, ", "))
	}
	times, err := mintTimes(get("ttl"), get("iat"), get("exp"), get("nbf"), time.Now())
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("mint: %w", err)
	}
	priv, err := loadPrivateKey(get("key"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("mint: --key: %w", err)
	}
	issuer := get("issuer")
	if issuer == "" {
		issuer = strings.TrimSpace(os.Getenv(envAuthIssuer))
	}
	if issuer == "" {
		issuer = mintDefaultIssuer
	}
	serverID := get("server-id")
	audience := get("audience")
	if audience == "" {
		audience = grants.AudiencePrefix + serverID
	}
	kid := get("kid")
	if kid == "" {
		kid = jwkThumbprint(priv.Public().(ed25519.PublicKey))
	}
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("mint: %w", err)
	}
	claims := jwt.MapClaims{
		"iss":          issuer,
		"aud":          audience,
		"sub":          "workspace-agent-grant:" + get("grant"),
		"grant_id":     get("grant"),
		"workspace_id": get("workspace"),
		"agent_id":     get("agent-id"),
		"agent_slug":   get("agent-slug"),
		"server_id":    serverID,
		"scopes":       scopes,
		"iat":          times.iat,
		"exp":          times.exp,
		"jti":          base64.RawURLEncoding.EncodeToString(jti),
		"dev":          true,
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
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: not a PKCS#8 private key: %w", path, err)
	}
	edKey, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: key is %T, not Ed25519", path, key)
	}
	return edKey, nil
}

// ---------------------------------------------------------------- check

func checkCobra() *cobra.Command {
	c := &cobra.Command{
		Use:   "check --config <Caddyfile> [--adapter caddyfile]",
		Short: "Checks every supervaizer_auth handler of a config and lists every problem",
		Args:  cobra.NoArgs,
	}
	c.Flags().StringP("config", "c", "", "Config file (- for stdin)")
	c.Flags().StringP("adapter", "a", "", "Config adapter (default caddyfile; none for a .json file)")
	c.RunE = wrap(cmdCheck)
	return c
}

func cmdCheck(fs caddycmd.Flags, stdout, _ io.Writer) (int, error) {
	file := fs.String("config")
	if file == "" {
		return caddy.ExitCodeFailedStartup, errors.New("check: --config <file> is required")
	}
	cfgJSON, warnings, err := adaptConfig(file, fs.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("check: %w", err)
	}
	rep := checkConfig(cfgJSON)
	rep.notes = append(warnings, rep.notes...)
	rep.print(stdout)
	if n := rep.problemCount(); n > 0 {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("check: %s: %d problem(s)", file, n)
	}
	return 0, nil
}

// adaptConfig reads file ("-" for stdin) and adapts it to JSON. The adapter
// defaults to caddyfile, except for a .json file which is read as JSON.
func adaptConfig(file, adapterName string) ([]byte, []string, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading config: %w", err)
	}
	if adapterName == "" && !strings.EqualFold(filepath.Ext(file), ".json") {
		adapterName = "caddyfile"
	}
	if adapterName == "" || adapterName == "json" {
		if !json.Valid(data) {
			return nil, nil, errors.New("config is not valid JSON (use --adapter)")
		}
		return data, nil, nil
	}
	adapter := caddyconfig.GetAdapter(adapterName)
	if adapter == nil {
		return nil, nil, fmt.Errorf("unrecognized config adapter %q", adapterName)
	}
	out, warns, err := adapter.Adapt(data, map[string]any{"filename": file})
	if err != nil {
		return nil, nil, fmt.Errorf("adapting config with %s: %w", adapterName, err)
	}
	var notes []string
	for _, w := range warns {
		notes = append(notes, "config warning: "+w.String())
	}
	return out, notes, nil
}

// checkReport is the result of check: per handler, its problems and the
// warnings start-up would log; then notes about the whole config.
type checkReport struct {
	handlers []handlerReport
	problems []string // problems of the config as a whole
	warnings []string // Caddy settings that put the gate at risk (caddyConfigWarnings)
	notes    []string
}

type handlerReport struct {
	label    string
	problems []string
	warnings []string
	settings []setting // effective settings after environment resolution (startup.go)
}

func (r *checkReport) problemCount() int {
	n := len(r.problems)
	for _, h := range r.handlers {
		n += len(h.problems)
	}
	return n
}

func (r *checkReport) print(w io.Writer) {
	for _, n := range r.notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, p := range r.problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	for _, wn := range r.warnings {
		fmt.Fprintf(w, "warning: %s\n", wn)
	}
	for _, h := range r.handlers {
		fmt.Fprintf(w, "%s:\n", h.label)
		if len(h.settings) > 0 {
			fmt.Fprintln(w, "  effective settings (secrets as fingerprints, URLs redacted):")
		}
		for _, s := range h.settings {
			fmt.Fprintf(w, "    %-26s %s  [%s]\n", s.Name, s.Value, s.Source)
		}
		for _, p := range h.problems {
			fmt.Fprintf(w, "  problem: %s\n", p)
		}
		for _, wn := range h.warnings {
			fmt.Fprintf(w, "  warning: %s\n", wn)
		}
		if len(h.problems) == 0 {
			fmt.Fprintln(w, "  ok")
		}
	}
	if n := r.problemCount(); n > 0 {
		fmt.Fprintf(w, "FAILED: %d problem(s)\n", n)
	} else {
		fmt.Fprintln(w, "OK")
	}
}

// checkConfig checks every http.handlers.supervaizer_auth handler of an
// adapted JSON config, and Caddy's own admin and autosave settings (the
// "admin" section, caddyConfigWarnings).
func checkConfig(cfgJSON []byte) *checkReport {
	rep := &checkReport{}
	var tree any
	if err := json.Unmarshal(cfgJSON, &tree); err != nil {
		rep.problems = append(rep.problems, "config is not valid JSON: "+err.Error())
		return rep
	}
	var top struct {
		Admin *caddy.AdminConfig `json:"admin"`
	}
	if err := json.Unmarshal(cfgJSON, &top); err != nil {
		rep.problems = append(rep.problems, "config admin section does not decode: "+err.Error())
	}
	rep.warnings = caddyConfigWarnings(top.Admin)
	var found []foundHandler
	findHandlers(tree, "", "", nil, &found)
	if len(found) == 0 {
		rep.problems = append(rep.problems, "no supervaizer_auth handler in the config")
	}
	for i, f := range found {
		hr := handlerReport{label: f.label(i + 1)}
		hr.problems, hr.warnings, hr.settings = checkHandler(f.raw)
		rep.handlers = append(rep.handlers, hr)
	}
	return rep
}

// foundHandler is one supervaizer_auth handler object of the config.
type foundHandler struct {
	path   string
	server string
	hosts  []string
	raw    map[string]any
}

func (f foundHandler) label(n int) string {
	var where []string
	if f.server != "" {
		where = append(where, "server "+f.server)
	}
	if len(f.hosts) > 0 {
		where = append(where, "host "+strings.Join(f.hosts, ", "))
	}
	s := "supervaizer_auth #" + strconv.Itoa(n)
	if len(where) > 0 {
		s += " (" + strings.Join(where, "; ") + ")"
	}
	return s + " at " + f.path
}

// findHandlers walks the whole config (routes, subroutes, error routes,
// named routes, ...) for handler objects {"handler":"supervaizer_auth",...},
// noting the HTTP server and the host matchers of the enclosing routes.
func findHandlers(v any, path, server string, hosts []string, out *[]foundHandler) {
	switch v := v.(type) {
	case map[string]any:
		if name, _ := v["handler"].(string); name == "supervaizer_auth" {
			*out = append(*out, foundHandler{path: path, server: server, hosts: hosts, raw: v})
			return
		}
		if matchers, ok := v["match"].([]any); ok {
			hosts = slices.Clone(hosts)
			for _, m := range matchers {
				mm, _ := m.(map[string]any)
				hl, _ := mm["host"].([]any)
				for _, h := range hl {
					if s, ok := h.(string); ok {
						hosts = append(hosts, s)
					}
				}
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			srv := server
			if path == "apps.http.servers" {
				srv = k
			}
			p := k
			if path != "" {
				p = path + "." + k
			}
			findHandlers(v[k], p, srv, hosts, out)
		}
	case []any:
		for i, e := range v {
			findHandlers(e, path+"["+strconv.Itoa(i)+"]", server, hosts, out)
		}
	}
}

// checkHandler unmarshals one handler as Caddy would and returns its
// problems, the warnings its provisioning logs and its effective settings.
func checkHandler(raw map[string]any) (problems, warnings []string, settings []setting) {
	body := make(map[string]any, len(raw))
	for k, v := range raw {
		if k != "handler" {
			body[k] = v
		}
	}
	b, _ := json.Marshal(body)
	var h Handler
	if err := caddy.StrictUnmarshalJSON(b, &h); err != nil {
		return []string{"config does not decode: " + err.Error()}, nil, nil
	}
	problems, warnings, settings = provisionProblems(h)

	// Checks start-up does not make: it starts with the JWKS down and waits.
	wa := h.WorkspaceAuth
	if wa == nil {
		wa = &WorkspaceAuth{}
	}
	if u := strSetting(wa.JWKSURL, envAuthJWKS); u != "" {
		problems = append(problems, checkJWKS(u)...)
	}
	problems = append(problems, checkRegistration(&h)...)
	return problems, warnings, settings
}

// provisionProblems builds h exactly as Provision does (same settings, same
// rules: Handler.build reports every problem at once) with a logger that
// records warnings instead of printing them, and closes what it built.
// Lines of the background JWKS and card refreshes are left out: whether they
// ran before the close is chance, and check fetches both itself.
func provisionProblems(h Handler) (problems, warnings []string, settings []setting) {
	core, logs := observer.New(zapcore.WarnLevel)
	g, err := h.build(zap.New(core), nil)
	if g != nil {
		g.close()
	}
	if err != nil {
		var joined interface{ Unwrap() []error }
		list := []error{err}
		if errors.As(err, &joined) {
			list = joined.Unwrap()
		}
		for _, e := range list {
			problems = append(problems, strings.TrimPrefix(e.Error(), "supervaizer_auth: "))
		}
	}
	for _, e := range logs.All() {
		if e.LoggerName == "registration" || strings.Contains(e.Message, "JWKS fetch failed") {
			continue
		}
		warnings = append(warnings, e.Message)
	}
	return problems, warnings, h.effective
}

// checkJWKS fetches url once and checks the document is a JWKS the verifier
// can use: HTTP 200, at most grants.MaxJWKSBytes, {"keys":[{...},...]},
// every key parsable, at least one Ed25519 key with a kid, no private key.
func checkJWKS(url string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), checkFetchTimeout)
	defer cancel()
	prefix := "workspace_auth jwks_url " + redactURL(url) + ": "
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return []string{prefix + "not a URL"}
	}
	resp, err := (&http.Client{Timeout: checkFetchTimeout}).Do(req)
	if err != nil {
		return []string{prefix + "unreachable: " + redactURLsIn(err.Error())}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return []string{prefix + "unreachable: answered HTTP " + strconv.Itoa(resp.StatusCode)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, grants.MaxJWKSBytes+1))
	if err != nil {
		return []string{prefix + "unreachable: reading the answer: " + redactURLsIn(err.Error())}
	}
	if len(body) > grants.MaxJWKSBytes {
		return []string{prefix + "not a valid JWKS: larger than 1 MiB"}
	}
	var doc map[string]json.RawMessage
	var keys []json.RawMessage
	if json.Unmarshal(body, &doc) != nil || doc["keys"] == nil || json.Unmarshal(doc["keys"], &keys) != nil {
		return []string{prefix + `not a valid JWKS: not a JSON object with a "keys" list`}
	}
	var problems []string
	usable := 0
	for i, k := range keys {
		var m jwkset.JWKMarshal
		if err := json.Unmarshal(k, &m); err != nil {
			problems = append(problems, fmt.Sprintf("%snot a valid JWKS: key %d is not a JSON object", prefix, i))
			continue
		}
		if m.D != "" {
			problems = append(problems, fmt.Sprintf("%skey %d (kid %q) publishes private key material (d)", prefix, i, m.KID))
		}
		jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if errors.Is(err, jwkset.ErrUnsupportedKey) {
			continue
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%snot a valid JWKS: key %d (kid %q): %v", prefix, i, m.KID, err))
			continue
		}
		if _, ok := jwk.Key().(ed25519.PublicKey); ok && m.KID != "" {
			usable++
		}
	}
	if usable == 0 && len(problems) == 0 {
		problems = append(problems, prefix+"no Ed25519 (OKP) key with a kid: no token can verify")
	}
	return problems
}

// checkRegistration reads, once and with a 5 s timeout, the card (or file)
// of every configured agent slug when a registration source is on, and
// reports what start-up tolerates and retries in the background: an
// unreachable or unreadable card, a card for another slug, version pins
// that are not accepted. A source Provision refuses is left to Provision.
func checkRegistration(h *Handler) []string {
	rc := h.Registration
	if rc == nil {
		rc = &RegistrationConfig{}
	}
	src := rc.Source
	if src == "" && h.Upstream != "" {
		src = "from_upstream"
	}
	slugs := make([]string, 0, len(h.Agents))
	for slug := range h.Agents {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	if len(slugs) == 0 {
		return nil
	}
	accepted := registration.AcceptedVersions{A2A: rc.A2AVersions, A2UI: rc.A2UIVersions}
	var (
		s    *registration.Source
		err  error
		from string
	)
	switch src {
	case "from_upstream":
		from = "upstream " + redactURL(h.Upstream)
		s, err = registration.NewUpstreamSource(registration.UpstreamOptions{BaseURL: h.Upstream, Slugs: slugs, Accepted: accepted})
	case "file":
		if rc.File == "" {
			return nil
		}
		from = "registration file " + rc.File
		s, err = registration.NewFileSource(rc.File, slugs, registration.FileOptions{Accepted: accepted})
	default:
		return nil
	}
	if err != nil {
		return nil
	}
	defer s.Close()
	var problems []string
	for _, slug := range slugs {
		ctx, cancel := context.WithTimeout(context.Background(), checkFetchTimeout)
		if err := s.Refresh(ctx, slug); err != nil {
			problems = append(problems, fmt.Sprintf("agent %s: card from %s: %s", slug, from, redactURLsIn(err.Error())))
		}
		cancel()
	}
	return problems
}
