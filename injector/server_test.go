package injector

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

func review(t *testing.T, pod any) []byte {
	t.Helper()
	raw, _ := json.Marshal(pod)
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{"uid": "uid-7", "kind": map[string]string{"group": "", "version": "v1", "kind": "Pod"},
			"resource":  map[string]string{"group": "", "version": "v1", "resource": "pods"},
			"operation": "CREATE", "namespace": "ns", "object": json.RawMessage(raw)},
	})
	return b
}

func TestInjectorHandler(t *testing.T) {
	var logs bytes.Buffer
	srv := httptest.NewServer(testCfg.Handler(slog.New(slog.NewJSONHandler(&logs, nil))))
	defer srv.Close()
	post := func(ct string, body []byte) (*http.Response, []byte) {
		resp, err := http.Post(srv.URL+"/mutate", ct, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	decode := func(b []byte) *admissionv1.AdmissionReview {
		var r admissionv1.AdmissionReview
		if err := json.Unmarshal(b, &r); err != nil || r.Response == nil {
			t.Fatalf("not a review with a response: %s", b)
		}
		if r.APIVersion != "admission.k8s.io/v1" || r.Kind != "AdmissionReview" || r.Response.UID != "uid-7" {
			t.Fatalf("review %s %s uid %s", r.APIVersion, r.Kind, r.Response.UID)
		}
		return &r
	}

	resp, b := post("application/json", review(t, optedIn(map[string]string{AnnotationConfig: "cfg"})))
	r := decode(b)
	if resp.StatusCode != 200 || !r.Response.Allowed || r.Response.PatchType == nil || *r.Response.PatchType != admissionv1.PatchTypeJSONPatch ||
		!strings.Contains(string(r.Response.Patch), `"name":"supervaizer-sidecar"`) {
		t.Fatalf("%d %+v", resp.StatusCode, r.Response)
	}
	if !strings.Contains(logs.String(), `"msg":"sidecar injected"`) {
		t.Fatalf("no injection logged: %s", logs.String())
	}

	resp, b = post("application/json", review(t, optedIn(map[string]string{AnnotationConfig: "cfg", AnnotationAgentPort: "x"})))
	r = decode(b)
	if resp.StatusCode != 200 || r.Response.Allowed || !strings.Contains(r.Response.Result.Message, AnnotationAgentPort) {
		t.Fatalf("%d %+v", resp.StatusCode, r.Response)
	}
	if !strings.Contains(logs.String(), `"msg":"pod denied"`) {
		t.Fatalf("no denial logged: %s", logs.String())
	}

	for name, tc := range map[string]struct {
		ct   string
		body []byte
		code int
	}{
		"content type": {"text/plain", review(t, optedIn(nil)), http.StatusUnsupportedMediaType},
		"not json":     {"application/json", []byte("{"), http.StatusBadRequest},
		"no request":   {"application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest},
		"v1beta1":      {"application/json", bytes.Replace(review(t, optedIn(nil)), []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v1beta1"), 1), http.StatusBadRequest},
		"too large":    {"application/json", append(review(t, optedIn(nil)), bytes.Repeat([]byte(" "), MaxReviewBytes)...), http.StatusRequestEntityTooLarge},
	} {
		if resp, b := post(tc.ct, tc.body); resp.StatusCode != tc.code {
			t.Errorf("%s: %d %s, want %d", name, resp.StatusCode, b, tc.code)
		}
	}
	if resp, err := http.Get(srv.URL + "/mutate"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /mutate: %v %v", resp, err)
	}
	if resp, err := http.Get(srv.URL + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /healthz: %v %v", resp, err)
	}
}

func writePair(t *testing.T, dir, cn string) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{cn}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	cf, kf := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(cf+".new", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(kf+".new", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
	os.Rename(cf+".new", cf)
	os.Rename(kf+".new", kf)
	return cf, kf
}

func TestInjectorCertReload(t *testing.T) {
	dir := t.TempDir()
	cf, kf := writePair(t, dir, "one.test")
	r := &CertReloader{CertFile: cf, KeyFile: kf, Interval: 0}
	if err := r.Load(); err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := x509.ParseCertificate(c.Certificate[0])
		return x.Subject.CommonName
	}
	if cn() != "one.test" {
		t.Fatal("first pair not served")
	}
	writePair(t, dir, "two.test")
	// The size or the modification time differs (a new serial number and key).
	os.Chtimes(cf, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	if got := cn(); got != "two.test" {
		t.Fatalf("after rotation: %s", got)
	}
	os.WriteFile(kf, []byte("garbage"), 0o600)
	os.Chtimes(kf, time.Now().Add(2*time.Minute), time.Now().Add(2*time.Minute))
	if got := cn(); got != "two.test" {
		t.Fatalf("a broken pair replaced the good one: %s", got)
	}
	if err := (&CertReloader{CertFile: cf, KeyFile: kf}).Load(); err == nil || !strings.Contains(err.Error(), "--tls-key") {
		t.Fatalf("Load of a broken pair: %v", err)
	}
}
