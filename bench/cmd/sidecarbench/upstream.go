package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/agentsse"
)

// upstreamResult is the fixed JSON-RPC answer of the bench agent to every
// POST /a2a (the load requests all carry id 7).
const upstreamResult = `{"jsonrpc":"2.0","id":7,"result":{"status":"ok","effects":[]}}`

// upstreamCounts is what GET /_bench/count answers.
type upstreamCounts struct {
	A2A          int64 `json:"a2a"`           // POST /a2a requests received
	EventsOpen   int64 `json:"events_open"`   // /a2a/events streams open now
	EventsServed int64 `json:"events_served"` // /a2a/events streams ever opened
}

// upstreamMain runs the bench agent (upstreamHandler) on -listen.
func upstreamMain(args []string) {
	fs := flag.NewFlagSet("upstream", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address (loopback)")
	heartbeat := fs.Duration("heartbeat", 5*time.Second, "SSE heartbeat period")
	_ = fs.Parse(args)
	srv := &http.Server{Addr: *listen, Handler: upstreamHandler(*heartbeat), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// upstreamHandler is the bench agent: it answers
// like a Supervaizer agent, as cheaply as possible so that the proxy's cost
// dominates: POST /a2a reads the body and answers upstreamResult;
// GET /a2a/events is an SSE stream (supervaizer.connected, then a
// supervaizer.heartbeat every -heartbeat); GET /_bench/count reports the
// counters the load run checks (the agent is never called on refusals and
// replays); POST /_bench/capture arms the capture of the next POST /a2a's
// request headers, which GET /_bench/capture then answers (JSON, the
// header map as received: the B-ctx scenario's header set, bctx.go).
func upstreamHandler(heartbeat time.Duration) http.Handler {
	var a2a, open, served atomic.Int64
	var armed atomic.Bool                    // capture the next POST /a2a's headers
	var captured atomic.Pointer[http.Header] // what was captured (nil: nothing yet)
	result := []byte(upstreamResult)
	resultLen := strconv.Itoa(len(result))
	mux := http.NewServeMux()
	mux.HandleFunc("/a2a", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		a2a.Add(1)
		if armed.Load() && armed.CompareAndSwap(true, false) {
			h := r.Header.Clone()
			captured.Store(&h)
		}
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{resultLen}
		_, _ = w.Write(result)
	})
	mux.HandleFunc("/a2a/events", func(w http.ResponseWriter, r *http.Request) {
		open.Add(1)
		served.Add(1)
		defer open.Add(-1)
		agentsse.Serve(w, r, heartbeat)
	})
	mux.HandleFunc("/_bench/count", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(upstreamCounts{A2A: a2a.Load(), EventsOpen: open.Load(), EventsServed: served.Load()})
	})
	mux.HandleFunc("/_bench/capture", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			captured.Store(nil)
			armed.Store(true)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h := captured.Load()
		if h == nil {
			http.Error(w, "nothing captured", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(*h)
	})
	mux.HandleFunc("/.well-known/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	return mux
}
