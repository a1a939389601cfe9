// Command supervaizer-injector is the mutating admission webhook that adds
// supervaizer-sidecar to opted-in pods as a native sidecar (package
// injector; docs/kubernetes.md). It serves AdmissionReview v1 at POST
// /mutate over TLS only.
//
//	supervaizer-injector --image REF --tls-cert FILE --tls-key FILE [--listen :8443]
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/supervaize/supervaizer-sidecar/injector"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "supervaizer-injector:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("supervaizer-injector", flag.ContinueOnError)
	listen := fs.String("listen", ":8443", "address the webhook listens on (TLS)")
	certFile := fs.String("tls-cert", "", "PEM certificate chain served (required; read again when it changes)")
	keyFile := fs.String("tls-key", "", "PEM private key of --tls-cert (required)")
	image := fs.String("image", "", "the supervaizer-sidecar image injected (required)")
	pull := fs.String("image-pull-policy", "IfNotPresent", "the injected sidecar's imagePullPolicy: Always, IfNotPresent or Never")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "how long in-flight reviews get after SIGTERM")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg := injector.Config{Image: *image, PullPolicy: corev1.PullPolicy(*pull)}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *certFile == "" || *keyFile == "" {
		return errors.New("--tls-cert and --tls-key are required: the API server calls webhooks over TLS only")
	}
	if *grace <= 0 || *grace > 5*time.Minute {
		return fmt.Errorf("--shutdown-grace %s: want more than 0 and at most 5m", *grace)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	certs := &injector.CertReloader{CertFile: *certFile, KeyFile: *keyFile, Interval: 10 * time.Second, Log: log}
	if err := certs.Load(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	srv := &http.Server{
		Handler:           cfg.Handler(log),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("supervaizer-injector listening", "addr", ln.Addr().String(), "image", cfg.Image)
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	select {
	case err := <-done:
		return err
	case <-sig:
	}
	ctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	return srv.Shutdown(ctx)
}
