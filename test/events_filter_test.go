package test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// The SSE filter fails closed (issue 13): a workspace-filtered stream never
// passes bytes it could not filter. Each case runs through a proxied stream
// and through the fan-out (forEachEventsMode).

// sseAnswer is how the agent answers GET /a2a/events in a case.
type sseAnswer func(w http.ResponseWriter, r *http.Request)

// eventsAnswerAgent starts an agent that answers /a2a/events with answer
// (recording each such request's Accept-Encoding) and every other path with
// a JSON-RPC result.
func eventsAnswerAgent(t *testing.T, answer sseAnswer) (*agent, func() []string) {
	ag := startAgent(t)
	var mu sync.Mutex
	var encodings []string
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/a2a/events" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":7,"result":{"status":"ok"}}`)
			return
		}
		mu.Lock()
		encodings = append(encodings, strings.Join(r.Header.Values("Accept-Encoding"), ", "))
		mu.Unlock()
		answer(w, r)
	}
	return ag, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), encodings...) }
}

// streamBody is what the agents below send: connected, an effect of
// workspace B (req-B, never for A's stream), then one of A (req-A).
const streamBody = "event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n"

func effectsBA() string { return effect("req-B") + effect("req-A") }

// writeAnswer writes status and body, the head already set (the answer
// ends there: the fan-out reads a refusal's body to its end).
func writeAnswer(w http.ResponseWriter, status int, body string) {
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

// streamAfter writes the connected event on the head already set, then,
// once release is closed (the client has its first event: it has joined
// the fan-out), the effects of B and A; it holds the stream open until the
// client goes away.
func streamAfter(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
	w.WriteHeader(200)
	fmt.Fprint(w, streamBody)
	w.(http.Flusher).Flush()
	select {
	case <-release:
	case <-r.Context().Done():
		return
	}
	fmt.Fprint(w, effectsBA())
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// TestSSEFilterFailsClosed: an agent answer the filter cannot read — a 2xx
// that is not text/event-stream (whatever else it says), a status other
// than 200, an encoded stream — is 502 {"detail":"Bad Gateway"} to a
// filtered client, with nothing of the agent's head or body (the effects of
// both workspaces are in it) and a deny audit line; a Content-Type with
// parameters is still an event stream.
func TestSSEFilterFailsClosed(t *testing.T) { forEachEventsMode(t, testSSEFilterFailsClosed) }

func testSSEFilterFailsClosed(t *testing.T, mode func(*agent) string) {
	t.Run("refused", func(t *testing.T) { testSSEFilterRefuses(t, mode) })
	t.Run("filtered", func(t *testing.T) { testSSEFilterStillFilters(t, mode) })
}

// testSSEFilterRefuses: the answers a filtered client gets 502 for.
func testSSEFilterRefuses(t *testing.T, mode func(*agent) string) {
	refused := map[string]sseAnswer{
		"200 application/json": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Agent-Header", "from the agent")
			writeAnswer(w, 200, streamBody+effectsBA())
		},
		"200 without Content-Type": func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil // no sniffing either
			writeAnswer(w, 200, streamBody+effectsBA())
		},
		"200 text/event-stream-ish": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-streams")
			writeAnswer(w, 200, streamBody+effectsBA())
		},
		"201 text/event-stream": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			writeAnswer(w, 201, streamBody+effectsBA())
		},
		"200 text/event-stream, Content-Encoding br": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Content-Encoding", "br")
			writeAnswer(w, 200, streamBody+effectsBA()) // not really br: the point is it is not read
		},
	}
	for name, answer := range refused {
		t.Run(name, func(t *testing.T) {
			ag, _ := eventsAnswerAgent(t, answer)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))
			tokA, _ := twoWorkspaces(t, sc, key, "req-A", "req-B")
			r := do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
			wantDetail(t, r, http.StatusBadGateway, "Bad Gateway")
			if bytes.Contains(r.Body, []byte("req-")) || r.Header.Get("X-Agent-Header") != "" || r.Header.Get("Content-Encoding") != "" {
				t.Fatalf("the agent's answer leaked: %v %s", r.Header, r.Body)
			}
			eventually(t, "the deny audit line", func() bool {
				return strings.Contains(sc.logs(t), `"code":"event_stream_unfilterable"`)
			})
		})
	}
}

// testSSEFilterStillFilters: answers that stay filterable (the agent's
// effects reach the client only after release: the fan-out's joiners get
// live events).
func testSSEFilterStillFilters(t *testing.T, mode func(*agent) string) {
	filtered := map[string]func(release <-chan struct{}) sseAnswer{
		"Content-Type with parameters": func(release <-chan struct{}) sseAnswer {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "Text/Event-Stream; charset=utf-8")
				streamAfter(w, r, release)
			}
		},
		// Caddy's proxy forwards a 1xx to the response writer: it decides
		// nothing (the first head used to switch the filter off).
		"103 Early Hints first": func(release <-chan struct{}) sseAnswer {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", "</style.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Set("Content-Type", "text/event-stream")
				streamAfter(w, r, release)
			}
		},
		// An agent that compresses whenever asked: the client's
		// Accept-Encoding never reaches it (a transport's own gzip, which
		// the transport decodes, may).
		"agent compressing when asked": func(release <-chan struct{}) sseAnswer {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
					streamAfter(w, r, release)
					return
				}
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				fmt.Fprint(zw, streamBody)
				zw.Flush()
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				fmt.Fprint(zw, effectsBA())
				zw.Flush()
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}
		},
	}
	for name, answer := range filtered {
		t.Run(name, func(t *testing.T) {
			release := make(chan struct{})
			ag, encodings := eventsAnswerAgent(t, answer(release))
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))
			tokA, _ := twoWorkspaces(t, sc, key, "req-A", "req-B")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey,
				"X-Supervaize-Workspace-Authorization", "Bearer "+tokA, "Accept-Encoding", "gzip, br, zstd")
			defer resp.Body.Close()
			if ce := resp.Header.Get("Content-Encoding"); ce != "" {
				t.Fatalf("filtered stream with Content-Encoding %q", ce)
			}
			if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
				t.Fatalf("first event %q", e)
			}
			close(release)
			if e := readEvent(t, rd); !strings.Contains(e, `"request_id": "req-A"`) {
				t.Fatalf("workspace A's stream got %q, want only req-A's effect", e)
			}
			for _, ae := range encodings() {
				if strings.Contains(ae, "br") || strings.Contains(ae, "zstd") {
					t.Fatalf("the client's Accept-Encoding reached the agent: %q", ae)
				}
			}
		})
	}
}

// TestSSETokenForAnotherAgent: on /a2a/events, a token for an agent this
// sidecar does not serve is 403 with /a2a's answer for that agent
// (workspace_authorization_unknown_agent, same message), and so are tokens
// for a served slug with another Studio id (wrong_agent) or none configured
// (agent_not_registered); the agent opens no stream.
func TestSSETokenForAnotherAgent(t *testing.T) { forEachEventsMode(t, testSSETokenForAnotherAgent) }

func testSSETokenForAnotherAgent(t *testing.T, mode func(*agent) string) {
	ag, _ := eventsAnswerAgent(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		streamAfter(w, r, nil)
	})
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))

	stranger := key.mintWith(t, func(c jwt.MapClaims) { c["agent_slug"] = "someone_else"; c["agent_id"] = "studio-agent-9" })
	// What /a2a answers for a call to that agent, with that token.
	a := wantRPCError(t, sc.rpc(t, actionBody(t, func(r map[string]any) { r["agent_slug"] = "someone_else" }), stranger),
		-32030, "workspace_authorization_unknown_agent")
	ag.reset()
	for _, tc := range []struct {
		name, token, detail, code string
	}{
		{"unknown agent", stranger, a.Error.Message, "workspace_authorization_unknown_agent"},
		{"served slug, another Studio id", key.mintWith(t, func(c jwt.MapClaims) { c["agent_id"] = "studio-agent-2" }), "", "workspace_authorization_wrong_agent"},
		{"served slug without a Studio id", key.mintWith(t, func(c jwt.MapClaims) { c["agent_slug"] = "unregistered_agent" }), "", "workspace_authorization_agent_not_registered"},
	} {
		r := do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tc.token)
		wantDetail(t, r, http.StatusForbidden, tc.detail)
		if !strings.Contains(sc.logs(t), `"code":"`+tc.code+`"`) {
			t.Errorf("%s: no audit line with %s", tc.name, tc.code)
		}
	}
	nothingReached(t, ag)
	// The fixture's own agent still gets its filtered stream.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey,
		"X-Supervaize-Workspace-Authorization", "Bearer "+key.mint(t, baseClaims()))
	defer resp.Body.Close()
	if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
		t.Fatalf("first event %q", e)
	}
}

// TestSSEFilterFailsClosedEveryVersion: the 502 of a filtered stream whose
// agent answers a 200 that is not an event stream (and holds it open)
// reaches the client whole over every HTTP version, nothing of the agent's
// answer with it.
func TestSSEFilterFailsClosedEveryVersion(t *testing.T) {
	ag, _ := eventsAnswerAgent(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		fmt.Fprint(w, streamBody+effectsBA())
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startEveryProtocol(t, ag.addr(), jwksDirective(jw.url(), ""))
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		r := v.do(t, "GET", "/a2a/events", nil, "X-API-Key", testReadKey,
			"X-Supervaize-Workspace-Authorization", "Bearer "+key.mint(t, baseClaims()))
		wantDetail(t, r, http.StatusBadGateway, "Bad Gateway")
		if bytes.Contains(r.Body, []byte("req-")) {
			t.Fatalf("the agent's answer leaked: %s", r.Body)
		}
	})
}
