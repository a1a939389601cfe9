package gate

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
)

// BenchmarkServeHTTPFreshToken runs the whole handler in process for POST
// /a2a job.sync as the load run's C and D scenarios send it
// (bench/cmd/sidecarbench/load.go), audit=json (audit_log all, the
// default), the verified-token cache at its default bound (10,000):
//   - cached: one token, answered by the cache (C);
//   - fresh: a pool of 20,000 distinct valid tokens, twice the cache,
//     used in turn, so every call verifies a signature, fills the cache
//     and evicts its oldest entry (D); fresh - cached is what a fresh
//     token costs the handler above a cached one (the signature check
//     included, grants' BenchmarkVerify/bare_ed25519 is that alone).
//
// The tokens are minted before the timer (once for all runs of the
// benchmark): the signing is the client's, not the handler's.
func BenchmarkServeHTTPFreshToken(b *testing.B) {
	next := benchUpstream()
	u := &url.URL{Path: "/a2a"}
	body := benchBody(b, "job.sync")
	for _, sc := range []struct {
		name string
		pool int
	}{{"cached", 1}, {"fresh", 2 * 10_000}} {
		// One gate and one pool for every run b.Run makes of the case.
		e := newBenchGate(b, 0, true)
		e.g.auditAllows = true
		auths := make([]string, sc.pool)
		for i := range auths {
			auths[i] = "Bearer " + e.mint(b, "jti-fresh-"+strconv.Itoa(i))
		}
		bw := &benchWriter{h: http.Header{}}
		w := deadlineWriter{bw}
		i := 0
		serve := func() {
			r := &http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Host: "127.0.0.1", RequestURI: "/a2a", ContentLength: int64(len(body)),
				Body:   io.NopCloser(bytes.NewReader(body)),
				Header: benchRequestHeader(auths[i%len(auths)])}
			i++
			bw.reset()
			if err := e.g.Serve(w, r, next); err != nil {
				b.Fatal(err)
			}
			if bw.status != http.StatusOK || !bytes.Contains(bw.body.Bytes(), []byte(`"result"`)) {
				b.Fatalf("answer %d %s", bw.status, bw.body.Bytes())
			}
		}
		// Fill the cache as a long run has: every entry held, the next
		// call evicting.
		for range min(len(auths), 10_000) {
			serve()
		}
		b.Run(sc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
		})
	}
}
