package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// cmdTestMintArgs are complete mint flags, without --dev.
func cmdTestMintArgs(keyPath string) []string {
	return []string{"mint", "--key", keyPath, "--grant", "grant-1", "--workspace", "ws-1",
		"--workspace-slug", "acme", "--agent-slug", "agent_interviewer", "--agent-id", "agent-1",
		"--server-id", "srv-1", "--scope", "job.start", "--scope", "supervaizer/action.invoke, resource.contacts.list",
		"--issuer", "https://studio.test", "--agent-workspace-ref", "agent-ws-1"}
}

func TestCommandMintRefusesWithoutDev(t *testing.T) {
	cmdTestClearEnv(t)
	dir := cmdTestKeygen(t)
	stdout, _, err := cmdTestRun(t, cmdTestMintArgs(filepath.Join(dir, "studio-signing.key"))...)
	if err == nil || !strings.Contains(err.Error(), "local testing only") || !strings.Contains(err.Error(), "--dev") {
		t.Fatalf("mint without --dev: %v", err)
	}
	if stdout != "" {
		t.Fatalf("mint without --dev printed %q", stdout)
	}
}

func TestCommandMintNamesEveryMissingFlag(t *testing.T) {
	cmdTestClearEnv(t)
	_, _, err := cmdTestRun(t, "mint", "--dev", "--scope", " , ")
	if err == nil {
		t.Fatal("mint without its flags succeeded")
	}
	for _, f := range []string{"--key", "--grant", "--workspace", "--agent-slug", "--agent-id", "--server-id", "--scope"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
	if strings.Contains(err.Error(), "--workspace-slug") || strings.Contains(err.Error(), "--issuer") {
		t.Errorf("error %q names an optional flag", err)
	}
}

func TestCommandMintRefusesNonEd25519Key(t *testing.T) {
	cmdTestClearEnv(t)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	path := filepath.Join(t.TempDir(), "ec.key")
	os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	args := append(cmdTestMintArgs(path), "--dev")
	if _, _, err := cmdTestRun(t, args...); err == nil || !strings.Contains(err.Error(), "not Ed25519") {
		t.Fatalf("mint with an ECDSA key: %v", err)
	}
}

func TestCommandMintTokenVerifies(t *testing.T) {
	cmdTestClearEnv(t)
	dir := cmdTestKeygen(t)
	stdout, _, err := cmdTestRun(t, append(cmdTestMintArgs(filepath.Join(dir, "studio-signing.key")), "--dev", "--ttl", "5m")...)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(stdout)

	pub, err := grants.LoadPublicKey(filepath.Join(dir, "studio-signing.pub"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := grants.NewVerifier(grants.Config{Issuer: "https://studio.test", ServerID: "srv-1", PublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	c, err := v.Verify(context.Background(), token)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !c.Dev {
		t.Error("dev claim is not true")
	}
	if want := []string{"job.start", "supervaizer/action.invoke", "resource.contacts.list"}; !slices.Equal(c.Scopes, want) {
		t.Errorf("scopes %q, want %q", c.Scopes, want)
	}
	got := []string{c.Subject, c.GrantID, c.WorkspaceID, c.WorkspaceSlug, c.AgentID, c.AgentSlug, c.ServerID, c.AgentWorkspaceRef, strings.Join(c.Audience, ",")}
	want := []string{"workspace-agent-grant:grant-1", "grant-1", "ws-1", "acme", "agent-1", "agent_interviewer", "srv-1", "agent-ws-1", "supervaizer-server:srv-1"}
	if !slices.Equal(got, want) {
		t.Errorf("claims %q, want %q", got, want)
	}
	if c.ExpiresAt-c.IssuedAt != 300 || c.JTI == "" {
		t.Errorf("exp-iat %d, jti %q", c.ExpiresAt-c.IssuedAt, c.JTI)
	}

	// The header names the kid keygen published.
	var jwk map[string]string
	cmdTestReadJSON(t, filepath.Join(dir, "studio-signing.jwk.json"), &jwk)
	hdr, _ := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[0])
	var h map[string]any
	json.Unmarshal(hdr, &h)
	if h["alg"] != "EdDSA" || h["kid"] != jwk["kid"] {
		t.Errorf("header %v, want alg EdDSA and kid %s", h, jwk["kid"])
	}
}

func TestMintTimes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		ttl, iat, exp, nbf string
		wantIat, wantExp   int64
		wantNbf            int64 // 0: absent
	}{
		{"10m", "", "", "", now.Unix(), now.Unix() + 600, 0},
		{"-5m", "", "", "", now.Unix(), now.Unix() - 300, 0},
		{"10m", "+10m", "", "", now.Unix() + 600, now.Unix() + 1200, 0},
		{"10m", "1700000000", "2026-01-01T00:00:00Z", "-1m", 1_700_000_000, 1_767_225_600, now.Unix() - 60},
	} {
		got, err := mintTimes(c.ttl, c.iat, c.exp, c.nbf, now)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got.iat != c.wantIat || got.exp != c.wantExp || (c.wantNbf == 0) != (got.nbf == nil) || (got.nbf != nil && *got.nbf != c.wantNbf) {
			t.Errorf("%+v: got %+v", c, got)
		}
	}
	for _, bad := range [][4]string{{"soon", "", "", ""}, {"10m", "tomorrow", "", ""}, {"10m", "", "5m", ""}, {"10m", "", "", "x"}} {
		if _, err := mintTimes(bad[0], bad[1], bad[2], bad[3], now); err == nil {
			t.Errorf("mintTimes(%q) accepted", bad)
		}
	}
}
