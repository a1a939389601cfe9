package gate

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/textproto"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// BenchmarkVerifiedContextDownstream measures, for each form of the verified
// context (ten headers, compact, off), what the headers cost after the gate
// on one forwarded request: the gate's injection, Caddy reverse_proxy's
// copy of the header map, the transport's header write, and the agent's
// parse of the header block (Go's textproto, as net/http's server does).
// Caddy's per-request logger over the same headers is
// BenchmarkVerifiedContextCaddyLog (caddymodule, which has Caddy). The request carries the bench's other headers
// (X-API-Key, the token, ...), the same in every form.
func BenchmarkVerifiedContextDownstream(b *testing.B) {
	ctx := context.Background()
	e := newBenchGate(b, 0, false)
	values := []string{"Bearer " + e.mint(b, "jti-downstream")}
	d := e.g.decideCall(ctx, benchCall(b, ""), earlyToken{token: grants.TokenFromHeader(values)}, &audit{})
	if !d.allowed() {
		b.Fatal(d.refusal)
	}
	base := http.Header{
		"X-Api-Key": {benchAPIKey}, "Content-Type": {"application/json"}, "User-Agent": {"Go-http-client/1.1"},
		"Content-Length": {"600"}, headerWorkspaceAuth: values, "X-Forwarded-For": {"127.0.0.1"},
		"X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"127.0.0.1:8080"}, "Via": {"1.1 Caddy"},
	}
	for _, form := range []struct {
		name string
		form VerifiedForm
	}{{"headers", VerifiedEach}, {"compact", VerifiedCompact}, {"off", VerifiedOff}} {
		g := &Gate{verified: form.form} // injectVerified reads only the form
		h := base.Clone()
		g.injectVerified(h, d)
		var block bytes.Buffer
		_ = h.Write(&block)
		block.WriteString("\r\n")
		b.Run(form.name+"/inject", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				hh := base.Clone()
				g.injectVerified(hh, d)
			}
		})
		b.Run(form.name+"/clone", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = h.Clone()
			}
		})
		b.Run(form.name+"/write", func(b *testing.B) {
			b.ReportAllocs()
			w := bufio.NewWriter(io.Discard)
			for b.Loop() {
				_ = h.Write(w)
			}
		})
		b.Run(form.name+"/agent_parse", func(b *testing.B) {
			b.ReportAllocs()
			raw := block.Bytes()
			r := bytes.NewReader(raw)
			br := bufio.NewReader(r)
			for b.Loop() {
				r.Reset(raw)
				br.Reset(r)
				if _, err := textproto.NewReader(br).ReadMIMEHeader(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
