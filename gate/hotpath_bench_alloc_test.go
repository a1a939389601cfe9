package gate

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// deadlineWriter is a benchWriter that accepts read deadlines, as net/http's
// (and Caddy's wrapped) response writer does, so readBody takes its
// production path instead of building a "not supported" error.
type deadlineWriter struct{ *benchWriter }

func (deadlineWriter) SetReadDeadline(time.Time) error { return nil }

// allocBudget is an allocation budget of a hot path, checked in make bench
// (not in make test: a Go release may change allocation counts). Called
// after the b.Loop loop (b.Loop's timer reset drops earlier metrics), it reports
// the budget as the budget-allocs/op metric beside allocs/op and fails the
// benchmark when f allocates more on average.
func allocBudget(b *testing.B, budget float64, f func()) {
	b.Helper()
	b.ReportMetric(budget, "budget-allocs/op")
	if got := testing.AllocsPerRun(100, f); got > budget {
		b.Errorf("%v allocs/op, budget %v", got, budget)
	}
}

// BenchmarkReadBody is (*Gate).readBody for a 600-byte /a2a body, with a
// declared Content-Length (HTTP/1.1 clients, Studio) and without one
// (chunked). Budget: a declared body is read into one buffer (the bound's
// reader stays on the stack), at most 1 alloc/op.
func BenchmarkReadBody(b *testing.B) {
	g := &Gate{maxBodyA2A: 16 << 20, // max_body_a2a's default
		bodyTimeout: time.Second}
	body := bytes.Repeat([]byte("x"), 600)
	w := deadlineWriter{&benchWriter{h: http.Header{}}}
	for _, declared := range []bool{true, false} {
		name := "declared"
		if !declared {
			name = "undeclared"
		}
		b.Run(name, func(b *testing.B) {
			rd := bytes.NewReader(body)
			r := &http.Request{Header: http.Header{}, Body: io.NopCloser(rd), ContentLength: -1}
			if declared {
				r.ContentLength = int64(len(body))
			}
			read := func() {
				rd.Reset(body)
				got, held, status, _ := g.readBody(w, r, g.maxBodyA2A, chargeTo{})
				held.release()
				if status != 0 || len(got) != len(body) {
					b.Fatal(status, len(got))
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				read()
			}
			if declared {
				allocBudget(b, 1, read)
			}
		})
	}
}

// BenchmarkResetBody is resetBody: the read body put back on the request,
// with its GetBody.
func BenchmarkResetBody(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 600)
	r := &http.Request{Header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		resetBody(r, body)
	}
}

// BenchmarkLogDecision is the audit line of one decision with every field
// set, encoded by a production JSON core into io.Discard (json), or dropped
// by a logger whose level is above the line's (warn, for an allow line).
// Budget: a line allocates nothing, encoded (its fields in a pooled array)
// or dropped (0 allocs/op).
func BenchmarkLogDecision(b *testing.B) {
	a := audit{route: "controller", method: http.MethodPost, target: "action.job.sync",
		agentSlug: benchAgent, workspaceID: "workspace_123", grantID: "grant-1", jti: "jti-1"}
	for _, sc := range []struct {
		name  string
		level zapcore.Level
		deny  bool
	}{{"allow/json", zap.InfoLevel, false}, {"deny/json", zap.InfoLevel, true}, {"allow/level=warn", zap.WarnLevel, false}} {
		b.Run(sc.name, func(b *testing.B) {
			g := &Gate{auditAllows: true, metrics: NewMetrics(nil, func() float64 { return 0 }),
				log: zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
					zapcore.AddSync(io.Discard), sc.level))}
			line := func() {
				a := a
				if sc.deny {
					a.deny("wrong_workspace")
				} else {
					a.allow(verifiedToken)
				}
				g.logDecision(&a, 1234*time.Microsecond)
			}
			b.ReportAllocs()
			for b.Loop() {
				line()
			}
			allocBudget(b, 0, line)
		})
	}
}
