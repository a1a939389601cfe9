package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Identities of the bench deployment (the same shapes as test/harness_test.go).
const (
	benchIssuer   = "https://studio.bench"
	benchServerID = "srv-bench"
	benchAgent    = "agent_interviewer"
	benchAgentID  = "studio-agent-1"
	benchWriteKey = "bench-write-key-0123456789"
	benchReadKey  = "bench-read-key-0123456789"
)

// site names of the generated Caddyfile.
const (
	siteB      = "B"         // plain reverse_proxy
	siteC      = "C"         // supervaizer_auth, one token reused
	siteD      = "D"         // supervaizer_auth, a new token every request
	siteE      = "E"         // supervaizer_auth, bad signatures
	siteFMem   = "F-mem"     // supervaizer_auth, idempotency memory store
	siteFRedis = "F-redis"   // supervaizer_auth, idempotency redis store
	siteM      = "metrics"   // Caddy's metrics handler (same registry as the gate's)
	siteBHdr   = "B-hdr"     // diagnostic: plain reverse_proxy adding the verified headers (-only B-hdr)
	siteCNoFwd = "C-nofwd"   // diagnostic: C with forward_token off (-only C-nofwd)
	siteCFan   = "C-fan"     // C with events_fanout on: the SSE memory measurement
	siteCNoHdr = "C-nohdr"   // diagnostic: C with verified_headers off (-only B,C,C-nohdr)
	siteCComp  = "C-compact" // diagnostic: C with verified_headers compact (-only B,C,C-compact)
)

// env is one bench deployment: the upstream, redis-server (optional) and the
// sidecar binary, each a child process on loopback, plus the tokens.
type env struct {
	cfg *config
	dir string

	upstream     *child
	upstreamAddr string
	redis        *child
	redisAddr    string
	sidecar      *child
	ports        map[string]int // site -> port
	adminPort    int            // Caddy's admin endpoint on loopback (0: admin off)

	// The twin (-twin): a second sidecar process serving B and C only,
	// with the same global options but reverse_proxy's logger the other
	// way round (twin.go).
	twin      *child
	twinPorts map[string]int // base site (B, C) -> port
	twinAdmin int

	studioPriv ed25519.PrivateKey
	tokenOne   string   // C, F: one valid token
	tokenPool  []string // D: distinct valid tokens
	tokenBad   []string // E: distinct tokens signed by another key

	bodySync []byte // the fixture's request as job.sync (A-E)
	// ctxHeaders are the ten verified headers the agent receives through
	// C, which B-ctx's client sends itself (bctx.go); nil without B-ctx.
	ctxHeaders http.Header
	bodyStart  []byte // the fixture's job.start (F)
}

// child is a process started by the bench; stop ends it by its pid.
type child struct {
	name   string
	cmd    *exec.Cmd
	errLog string
	done   chan struct{}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to 5 s, then SIGKILL.
func (c *child) stop() {
	if c == nil || c.cmd.Process == nil || !c.alive() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func startChild(name, dir string, extraEnv []string, bin string, args ...string) (*child, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cleanEnv(dir), extraEnv...)
	errLog := filepath.Join(dir, name+".log")
	f, err := os.Create(errLog)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, errLog: errLog, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

// cleanEnv is the environment of a child: no SUPERVAIZER_* settings (the
// Caddyfile sets everything) and Caddy's storage in the bench's temp dir.
func cleanEnv(dir string) []string {
	var out []string
	for _, e := range os.Environ() {
		name, _, _ := strings.Cut(e, "=")
		switch {
		case strings.HasPrefix(name, "SUPERVAIZER_"), name == "HOME", name == "XDG_DATA_HOME", name == "XDG_CONFIG_HOME":
			continue
		}
		out = append(out, e)
	}
	return append(out, "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
}

func (c *child) tail() string {
	b, _ := os.ReadFile(c.errLog)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitListen(c *child, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		if !c.alive() {
			return fmt.Errorf("%s exited: %s", c.name, c.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not listen on %s: %v\n%s", c.name, addr, err, c.tail())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// setup builds the keys, tokens and bodies, then starts the upstream,
// redis-server (when wanted and on PATH) and the sidecar with a generated
// Caddyfile, and waits until every site answers.
func setup(ctx context.Context, cfg *config, withAdmin bool) (*env, error) {
	dir, err := os.MkdirTemp("", "sidecarbench-")
	if err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, dir: dir, ports: map[string]int{}}
	if err := e.makeBodies(); err != nil {
		return e, err
	}
	if err := e.makeTokens(); err != nil {
		return e, err
	}

	if err := e.startUpstream(); err != nil {
		return e, err
	}
	if err := e.startRedis(); err != nil {
		return e, err
	}

	// Sidecar.
	sites := []string{siteB, siteC, siteCFan, siteD, siteE, siteFMem, siteM}
	if e.redisAddr != "" {
		sites = append(sites, siteFRedis)
	}
	if cfg.fairness {
		sites = append(sites, siteL)
	}
	for _, diag := range []string{siteBHdr, siteCNoFwd, siteCNoHdr, siteCComp} {
		if cfg.only[diag] {
			sites = append(sites, diag)
		}
	}
	for _, s := range sites {
		if e.ports[s], err = freePort(); err != nil {
			return e, err
		}
	}
	if withAdmin {
		if e.adminPort, err = freePort(); err != nil {
			return e, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(e.caddyfile(e.ports, e.adminPort, "sidecar", cfg.logConf == "shipped")), 0o600); err != nil {
		return e, err
	}
	if err := e.startSidecar(); err != nil {
		return e, err
	}
	return e, ctx.Err()
}

// startUpstream runs the bench's upstream (this binary's upstream command)
// and waits until it listens.
func (e *env) startUpstream() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	up, err := freePort()
	if err != nil {
		return err
	}
	e.upstreamAddr = fmt.Sprintf("127.0.0.1:%d", up)
	if e.upstream, err = startChild("upstream", e.dir, nil, self, "upstream", "-listen", e.upstreamAddr,
		"-heartbeat", e.cfg.heartbeat.String()); err != nil {
		return err
	}
	return waitListen(e.upstream, e.upstreamAddr, 10*time.Second)
}

// startRedis runs a redis-server for the F-redis scenario unless -redis
// off; without one on PATH the scenario is skipped (-redis on: an error).
func (e *env) startRedis() error {
	if e.cfg.redis == "off" {
		return nil
	}
	path, lerr := exec.LookPath("redis-server")
	switch {
	case lerr != nil && e.cfg.redis == "on":
		return errors.New("-redis on but redis-server is not on PATH")
	case lerr != nil:
		fmt.Println("redis-server not on PATH: the F-redis scenario is skipped")
		return nil
	}
	rp, err := freePort()
	if err != nil {
		return err
	}
	e.redisAddr = fmt.Sprintf("127.0.0.1:%d", rp)
	if e.redis, err = startChild("redis", e.dir, nil, path, "--port", strconv.Itoa(rp), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", e.dir); err != nil {
		return err
	}
	return waitRedis(e.redis, e.redisAddr)
}

// startSidecar runs the sidecar binary on the generated Caddyfile and waits
// until every site listens and the gate is ready.
func (e *env) startSidecar() error {
	var err error
	if e.sidecar, err = startChild("sidecar", e.dir, e.cfg.sidecarEnv, e.cfg.sidecarBin, "run",
		"--config", filepath.Join(e.dir, "Caddyfile"), "--adapter", "caddyfile"); err != nil {
		return err
	}
	for _, port := range e.ports {
		if err := waitListen(e.sidecar, fmt.Sprintf("127.0.0.1:%d", port), 20*time.Second); err != nil {
			return err
		}
	}
	resp, err := http.Get(e.url(siteC, "/_sidecar/ready"))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sidecar not ready: %d", resp.StatusCode)
	}
	return nil
}

// restartSidecar stops the sidecar process and starts a fresh one (same
// config and ports): its memory and its memory-store records start empty.
func (e *env) restartSidecar() error {
	e.sidecar.stop()
	return e.startSidecar()
}

func (e *env) teardown() {
	if e == nil {
		return
	}
	e.sidecar.stop()
	e.twin.stop()
	e.redis.stop()
	e.upstream.stop()
	if e.cfg.keep {
		fmt.Println("kept", e.dir)
		return
	}
	os.RemoveAll(e.dir)
}

func (e *env) url(site, path string) string {
	if site == "A" {
		return "http://" + e.upstreamAddr + path
	}
	if base, ok := e.twinBase(site); ok {
		return fmt.Sprintf("http://127.0.0.1:%d%s", e.twinPorts[base], path)
	}
	return fmt.Sprintf("http://127.0.0.1:%d%s", e.ports[site], path)
}

// caddyfile generates a sidecar's config: admin off (on a loopback port
// when admin is set), auto_https off, the global log options of -logconf
// (globalLogs) with reverse_proxy's logger excluded or not, every site of
// ports on its own loopback port, the same reverse_proxy block on every
// site. name prefixes the log files.
func (e *env) caddyfile(ports map[string]int, admin int, name string, excludeRP bool) string {
	var b strings.Builder
	adminLine := "admin off"
	if admin != 0 {
		adminLine = fmt.Sprintf("admin 127.0.0.1:%d", admin)
	}
	fmt.Fprintf(&b, "{\n\t%s\n\tpersist_config off\n\tauto_https off\n%s}\n\n", adminLine, e.globalLogs(name, excludeRP))
	extra := ""
	if e.cfg.proxyExtra != "" {
		extra = "\t\t" + strings.ReplaceAll(strings.TrimSpace(e.cfg.proxyExtra), "\n", "\n\t\t") + "\n"
	}
	proxy := fmt.Sprintf("\treverse_proxy %s {\n%s\t}\n", e.upstreamAddr, extra)
	gate := func(extra string) string {
		return fmt.Sprintf(`	supervaizer_auth {
		api_key %s write
		api_key %s read
		server_id %s
		agent %s %s
		workspace_auth {
			required on
			issuer %s
			public_key %s
		}
%s	}
`, benchWriteKey, benchReadKey, benchServerID, benchAgent, benchAgentID, benchIssuer,
			filepath.Join(e.dir, "studio.pem"), extra)
	}
	site := func(name, body string) {
		if _, ok := ports[name]; ok {
			fmt.Fprintf(&b, "# %s\nhttp://127.0.0.1:%d {\n%s}\n\n", name, ports[name], body)
		}
	}
	site(siteB, proxy)
	site(siteC, gate("")+proxy)
	site(siteD, gate("")+proxy)
	site(siteE, gate("")+proxy)
	site(siteCNoFwd, gate("\t\tforward_token off\n")+proxy)
	site(siteCNoHdr, gate("\t\tverified_headers off\n")+proxy)
	site(siteCComp, gate("\t\tverified_headers compact\n")+proxy)
	site(siteCFan, gate(fmt.Sprintf("\t\tevents_fanout on\n\t\tupstream http://%s\n\t\tregistration off\n", e.upstreamAddr))+proxy)
	site(siteFMem, gate("\t\tidempotency {\n\t\t\tstore memory\n\t\t}\n")+proxy)
	site(siteFRedis, gate(fmt.Sprintf("\t\tidempotency {\n\t\t\tstore redis\n\t\t\tredis_url redis://%s/0\n\t\t}\n", e.redisAddr))+proxy)
	site(siteL, gate(fmt.Sprintf("\t\tlimits {\n\t\t\trate job.sync %d/s\n\t\t}\n", fairRate))+proxy)
	site(siteM, "\tmetrics\n")
	var hdr strings.Builder
	for _, h := range [][2]string{{"Mode", "token"}, {"Grant-Id", "grant-1"}, {"Workspace-Id", "workspace_123"},
		{"Workspace-Slug", "acme"}, {"Agent-Id", benchAgentID}, {"Agent-Slug", benchAgent}, {"Server-Id", benchServerID},
		{"Scopes", "supervaizer/action.invoke supervaizer/surface.load job.start job.sync job.start.form resource.contacts.list resource.contacts.create"},
		{"Agent-Workspace-Ref", "agent-ws-1"}, {"Token-Id", "jti-one"}} {
		fmt.Fprintf(&hdr, "\t\theader_up X-Supervaize-Verified-%s %q\n", h[0], h[1])
	}
	site(siteBHdr, fmt.Sprintf("\treverse_proxy %s {\n%s%s\t}\n", e.upstreamAddr, extra, hdr.String()))
	return b.String()
}

func waitRedis(c *child, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(conn, "PING\r\n")
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		if !c.alive() || time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not start on %s: %s", addr, c.tail())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// makeBodies builds the request bodies from the fixture's action request.
func (e *env) makeBodies() error {
	raw, err := os.ReadFile(e.cfg.fixture)
	if err != nil {
		return err
	}
	var f struct {
		ActionRequest map[string]any `json:"action_request"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return err
	}
	envelope := func(req map[string]any) ([]byte, error) {
		return json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "supervaizer/action.invoke",
			"params": map[string]any{"action_request": req}})
	}
	if e.bodyStart, err = envelope(f.ActionRequest); err != nil {
		return err
	}
	sync := map[string]any{}
	for k, v := range f.ActionRequest {
		sync[k] = v
	}
	sync["action"] = "job.sync"
	delete(sync, "idempotency_key")
	e.bodySync, err = envelope(sync)
	return err
}

// makeTokens generates the Studio key (its PEM is the sidecar's public_key),
// one valid token, a pool of distinct valid tokens and a pool of tokens
// signed by another key.
func (e *env) makeTokens() error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	e.studioPriv = priv
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.dir, "studio.pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	_, otherPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	start := time.Now()
	if e.tokenOne, err = mintToken(priv, "jti-one"); err != nil {
		return err
	}
	if e.tokenPool, err = mintPool(priv, e.cfg.tokens, "jti-pool-"); err != nil {
		return err
	}
	if e.tokenBad, err = mintPool(otherPriv, 1000, "jti-bad-"); err != nil {
		return err
	}
	fmt.Printf("minted %d tokens in %s\n", 1+len(e.tokenPool)+len(e.tokenBad), time.Since(start).Round(time.Millisecond))
	return nil
}

// mintToken signs the claims of test/harness_test.go's baseClaims (valid
// for one hour) with jti.
func mintToken(priv ed25519.PrivateKey, jti string) (string, error) {
	now := time.Now().Unix()
	claims := jwt.MapClaims{
		"iss": benchIssuer, "aud": "supervaizer-server:" + benchServerID, "sub": "workspace-agent-grant:grant-1",
		"grant_id": "grant-1", "workspace_id": "workspace_123", "workspace_slug": "acme",
		"agent_id": benchAgentID, "agent_slug": benchAgent, "server_id": benchServerID,
		"scopes": []any{"supervaizer/action.invoke", "supervaizer/surface.load", "job.start", "job.sync",
			"job.start.form", "resource.contacts.list", "resource.contacts.create"},
		"agent_workspace_ref": "agent-ws-1", "iat": now, "exp": now + 3600, "jti": jti,
	}
	return jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(priv)
}

func mintPool(priv ed25519.PrivateKey, n int, prefix string) ([]string, error) {
	out := make([]string, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	workers := runtime.NumCPU()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var r [4]byte
			for i := w; i < n; i += workers {
				_, _ = rand.Read(r[:])
				tok, err := mintToken(priv, prefix+strconv.Itoa(i)+"-"+hex.EncodeToString(r[:]))
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				out[i] = tok
			}
		}(w)
	}
	wg.Wait()
	return out, firstErr
}

// upstreamCount reads the bench agent's counters.
func (e *env) upstreamCount() (upstreamCounts, error) {
	var c upstreamCounts
	resp, err := http.Get("http://" + e.upstreamAddr + "/_bench/count")
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&c)
	return c, err
}

// sidecarMetrics reads the gate's Prometheus counters through the metrics
// site (the registry is shared by every supervaizer_auth handler of the
// config): series text -> value, supervaizer_sidecar_* only.
func (e *env) sidecarMetrics() (map[string]float64, error) {
	resp, err := http.Get(e.url(siteM, "/metrics"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "supervaizer_sidecar_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// post sends one request to site (used for priming and checks).
func (e *env) post(site string, body []byte, token string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, e.url(site, "/a2a"), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("X-API-Key", benchWriteKey)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}
