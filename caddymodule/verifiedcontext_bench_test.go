package caddymodule

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/supervaize/supervaizer-sidecar/config"
)

// BenchmarkVerifiedContextCaddyLog measures, for each form of the verified
// context (ten headers, compact, off), Caddy reverse_proxy's per-request
// logger over the request the gate forwards: it encodes every request
// header into logger.With even when nothing is logged. The rest of the
// headers' downstream cost is gate's BenchmarkVerifiedContextDownstream.
func BenchmarkVerifiedContextCaddyLog(b *testing.B) {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	logger := zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zapcore.InfoLevel))
	for _, form := range []struct {
		name string
		set  func(*config.Config)
	}{
		{"headers", func(*config.Config) {}},
		{"compact", func(c *config.Config) { c.VerifiedHeadersForm = "compact" }},
		{"off", func(c *config.Config) { c.VerifiedHeaders = new(false) }},
	} {
		h, _, mint := traceGate(b, form.set, func(c *config.Config) { c.AuditLog = "deny" })
		token := mint(nil)
		var forwarded *http.Request
		next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			forwarded = r.Clone(context.Background())
			w.WriteHeader(http.StatusOK)
			return nil
		})
		r, _ := jobSyncRequest(context.Background(), token)
		if err := h.ServeHTTP(httptest.NewRecorder(), r, next); err != nil || forwarded == nil {
			b.Fatalf("not forwarded: %v", err)
		}
		b.Run(form.name+"/caddy_log_with", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = logger.With(zap.Object("request", caddyhttp.LoggableHTTPRequest{Request: forwarded}))
			}
		})
	}
}
