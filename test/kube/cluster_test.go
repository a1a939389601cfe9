// Package kube_test runs the project's Kubernetes artefacts against a real
// API server: kube-apiserver and etcd built from their Go modules by
// setup.sh (this folder is a Go module of its own, so the product's go.mod
// gains nothing), started once per `go test` run on loopback ports and
// shared by every test. docs/kubernetes.md says what is checked.
package kube_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// cluster is the shared API server.
type cluster struct {
	bin        string // build/kube/bin: kube-apiserver, etcd, kubectl, helm
	crds       string // build/kube/crds: the prometheus-operator CRDs
	root       string // the repository root
	dir        string // this run's files (certificates, kubeconfig, logs)
	kubeconfig string
	cfg        *rest.Config
	cs         *kubernetes.Clientset
	procs      []*proc
}

// proc is a started child process; done closes when it has exited.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

var (
	clusterOnce sync.Once
	theCluster  *cluster
	clusterErr  error // the API server could not start: a failure
	clusterSkip string
	runDir      string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "supervaizer-kube-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runDir = dir
	code := m.Run()
	if theCluster != nil {
		theCluster.stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// kube returns the shared API server, started on first use. When the
// binaries cannot be built (no module proxy, not enough memory) the test is
// skipped with the reason, except under CI=true, where it fails: the
// Kubernetes tests must run there (.ci/run).
func kube(t *testing.T) *cluster {
	t.Helper()
	clusterOnce.Do(func() { theCluster, clusterSkip, clusterErr = startCluster() })
	if clusterSkip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Kubernetes test binaries are unavailable under CI: %s", clusterSkip)
		}
		t.Skipf("Kubernetes tests skipped: %s", clusterSkip)
	}
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return theCluster
}

func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root := filepath.Clean(filepath.Join(wd, "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "cmd", "supervaizer-sidecar")); err != nil {
		return "", fmt.Errorf("%s is not the repository root: %v", root, err)
	}
	return root, nil
}

func startCluster() (c *cluster, skip string, err error) {
	root, err := repoRoot()
	if err != nil {
		return nil, "", err
	}
	setup := exec.Command(filepath.Join(root, "test", "kube", "setup.sh"))
	var stdout, stderr bytes.Buffer
	setup.Stdout, setup.Stderr = &stdout, &stderr
	if err := setup.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, msg, nil
	}
	bin := strings.TrimSpace(stdout.String())
	c = &cluster{bin: bin, crds: filepath.Join(filepath.Dir(bin), "crds"), root: root, dir: runDir}
	if err := c.start(); err != nil {
		c.stop()
		return nil, "", err
	}
	return c, "", nil
}

// freePort reserves a loopback port and releases it for a child process.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// pki is a CA and what it signs, as PEM.
type pki struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	CAPEM  []byte
}

func newPKI(cn string) (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	return &pki{caCert: cert, caKey: key, CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// serving signs a loopback serving certificate; returns cert and key PEM.
func (p *pki) serving(cn string) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", cn}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), nil
}

func writeFiles(dir string, files map[string][]byte) error {
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// startProc starts bin with args, its output in dir/<name>.log.
func (c *cluster) startProc(name string, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphan if the test binary dies
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	c.procs = append(c.procs, p)
	return p, nil
}

func (c *cluster) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

const adminToken = "supervaizer-kube-test-admin"

func (c *cluster) start() error {
	etcdClient, err := freePort()
	if err != nil {
		return err
	}
	etcdPeer, err := freePort()
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	etcd, err := c.startProc("etcd", "-data-dir", filepath.Join(c.dir, "etcd"),
		"-client-url", etcdURL, "-peer-url", "http://127.0.0.1:"+strconv.Itoa(etcdPeer))
	if err != nil {
		return err
	}
	if err := waitHTTP(etcdURL+"/health", nil, 60*time.Second, etcd); err != nil {
		return fmt.Errorf("etcd did not start: %v\n%s", err, c.logTail("etcd"))
	}

	ca, err := newPKI("supervaizer-kube-test-ca")
	if err != nil {
		return err
	}
	crt, key, err := ca.serving("kube-apiserver")
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saDER, _ := x509.MarshalECPrivateKey(saKey)
	saPub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err := writeFiles(c.dir, map[string][]byte{
		"ca.crt": ca.CAPEM, "apiserver.crt": crt, "apiserver.key": key,
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
		"tokens.csv": []byte(adminToken + ",admin,admin,system:masters\n"),
	}); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	f := func(n string) string { return filepath.Join(c.dir, n) }
	api, err := c.startProc("kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+f("apiserver.crt"), "--tls-private-key-file="+f("apiserver.key"),
		"--cert-dir="+f("certs"),
		"--token-auth-file="+f("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+f("sa.pub"),
		"--service-account-signing-key-file="+f("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--profiling=false",
		"--enable-priority-and-fairness=false",
		"--watch-cache=false",
		// No endpoints for the "kubernetes" Service: a loopback address
		// cannot be one, and nothing in these tests reaches the API server
		// through a Service.
		"--endpoint-reconciler-type=none",
		"--v=0",
	)
	if err != nil {
		return err
	}
	host := "https://127.0.0.1:" + strconv.Itoa(port)
	c.cfg = &rest.Config{Host: host, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CAPEM},
		QPS: 100, Burst: 200, Timeout: 30 * time.Second}
	hc, err := rest.HTTPClientFor(c.cfg)
	if err != nil {
		return err
	}
	if err := waitHTTP(host+"/readyz", hc, 3*time.Minute, api); err != nil {
		return fmt.Errorf("kube-apiserver did not become ready: %v\n%s", err, c.logTail("kube-apiserver"))
	}
	if c.cs, err = kubernetes.NewForConfig(c.cfg); err != nil {
		return err
	}
	c.kubeconfig = f("kubeconfig")
	return os.WriteFile(c.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, host, f("ca.crt"), adminToken)), 0o600)
}

// waitHTTP polls url until it answers 200, the process exits, or timeout.
func waitHTTP(url string, hc *http.Client, timeout time.Duration, p *proc) error {
	if hc == nil {
		hc = &http.Client{}
	}
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.cmd.ProcessState)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		cancel()
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("after %s: %v", timeout, last)
}

func (c *cluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.procs = nil
}

var nsSeq struct {
	sync.Mutex
	n int
}

// namespace creates a fresh namespace (Pod Security restricted enforced,
// warned and audited when restricted) with its "default" ServiceAccount
// (no controller-manager runs here to create it; pods need it).
func (c *cluster) namespace(t *testing.T, prefix string, restricted bool) string {
	t.Helper()
	nsSeq.Lock()
	nsSeq.n++
	name := fmt.Sprintf("%s-%d", prefix, nsSeq.n)
	nsSeq.Unlock()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if restricted {
		ns.Labels = map[string]string{
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
			"pod-security.kubernetes.io/warn":            "restricted",
			"pod-security.kubernetes.io/warn-version":    "latest",
			"pod-security.kubernetes.io/audit":           "restricted",
		}
	}
	ctx := context.Background()
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cs.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// run runs one of the built tools (kubectl, helm) with the test kubeconfig;
// stdin may be nil. Returns stdout and stderr.
func (c *cluster) run(t *testing.T, stdin []byte, tool string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.bin, tool), args...)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig, "HOME="+c.dir, "HELM_CACHE_HOME="+filepath.Join(c.dir, "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(c.dir, "helm-config"), "HELM_DATA_HOME="+filepath.Join(c.dir, "helm-data"))
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// must runs a tool and fails the test on an error or on any warning the API
// server sent back (kubectl prints them as "Warning: ..." on stderr, e.g. a
// Pod Security violation of a Deployment's pod template).
func (c *cluster) must(t *testing.T, stdin []byte, tool string, args ...string) string {
	t.Helper()
	out, errOut, err := c.run(t, stdin, tool, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", tool, strings.Join(args, " "), err, errOut, out)
	}
	if strings.Contains(errOut, "Warning:") {
		t.Fatalf("%s %s: the API server warned:\n%s", tool, strings.Join(args, " "), errOut)
	}
	return out
}

// goBuild builds a package of the main module (the repository root) into
// this run's directory, once per run, and returns the binary's path.
var goBuilds sync.Map // pkg -> *goBuildResult

type goBuildResult struct {
	once sync.Once
	bin  string
	err  error
}

func (c *cluster) goBuild(t *testing.T, pkg string) string {
	t.Helper()
	v, _ := goBuilds.LoadOrStore(pkg, &goBuildResult{})
	r := v.(*goBuildResult)
	r.once.Do(func() {
		bin := filepath.Join(c.dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = c.root
		out, err := cmd.CombinedOutput()
		if err != nil {
			r.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			return
		}
		r.bin = bin
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.bin
}

// eventually polls cond every 100 ms until it returns nil or timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
