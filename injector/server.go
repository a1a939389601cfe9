package injector

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// MaxReviewBytes bounds an AdmissionReview body. The API server sends the
// whole pod, which etcd caps at 1.5 MiB; twice that leaves room for the
// review's own fields (and oldObject, absent on CREATE).
const MaxReviewBytes = 3 << 20

// Handler serves POST /mutate (AdmissionReview admission.k8s.io/v1) and
// GET /healthz. Every answer to a well-formed review is a review with the
// request's UID; a malformed request gets 400 (the API server then applies
// the webhook's failurePolicy: Fail).
func (c Config) Handler(log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("POST /mutate", func(w http.ResponseWriter, r *http.Request) {
		c.serveMutate(log, w, r)
	})
	return mux
}

func (c Config) serveMutate(log *slog.Logger, w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		http.Error(w, "supervaizer-injector: Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("supervaizer-injector: AdmissionReview larger than %d bytes", MaxReviewBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "supervaizer-injector: reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "supervaizer-injector: the body is not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" {
		http.Error(w, "supervaizer-injector: want an AdmissionReview of admission.k8s.io/v1, got "+review.APIVersion+" "+review.Kind, http.StatusBadRequest)
		return
	}
	req := review.Request
	resp := c.Mutate(req)
	attrs := []any{"uid", string(req.UID), "namespace", req.Namespace, "name", podName(req), "operation", string(req.Operation)}
	switch {
	case !resp.Allowed:
		log.Warn("pod denied", append(attrs, "reason", resp.Result.Message)...)
	case resp.Patch != nil:
		log.Info("sidecar injected", attrs...)
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(&out)
}

// podName is the pod's name, or its generateName prefix (a pod made by a
// ReplicaSet has no name yet on CREATE).
func podName(req *admissionv1.AdmissionRequest) string {
	if req.Name != "" {
		return req.Name
	}
	var meta struct {
		Metadata struct {
			GenerateName string `json:"generateName"`
		} `json:"metadata"`
	}
	if json.Unmarshal(req.Object.Raw, &meta) == nil && meta.Metadata.GenerateName != "" {
		return meta.Metadata.GenerateName + "*"
	}
	return ""
}

// CertReloader serves the key pair at CertFile/KeyFile, read again when
// either file changes (cert-manager and the kubelet rotate a mounted Secret
// in place), checked at most every Interval. A pair that fails to load
// keeps the last good one, and the failure is logged.
type CertReloader struct {
	CertFile, KeyFile string
	Interval          time.Duration
	Log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

// Load reads the pair once; the server must not start without it.
func (r *CertReloader) Load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reload()
}

func (r *CertReloader) fileStamp() string {
	var b bytes.Buffer
	for _, f := range []string{r.CertFile, r.KeyFile} {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d/", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

func (r *CertReloader) reload() error {
	stamp := r.fileStamp()
	c, err := tls.LoadX509KeyPair(r.CertFile, r.KeyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert %s / --tls-key %s: %w", r.CertFile, r.KeyFile, err)
	}
	r.cert, r.stamp, r.checked = &c, stamp, time.Now()
	return nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) >= r.Interval {
		r.checked = time.Now()
		if r.fileStamp() != r.stamp {
			if err := r.reload(); err != nil && r.Log != nil {
				r.Log.Error("TLS key pair not reloaded; serving the previous one", "error", err.Error())
			} else if err == nil && r.Log != nil {
				r.Log.Info("TLS key pair reloaded", "cert", r.CertFile)
			}
		}
	}
	if r.cert == nil {
		return nil, errors.New("no TLS key pair loaded")
	}
	return r.cert, nil
}
