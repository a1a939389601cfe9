package test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

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
			eventually(t, 15*time.Second, "the deny audit line", func() bool {
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

// chunkAgent serves /a2a like the default agent and /a2a/events as an SSE
// stream whose bytes are the chunks sent on the returned channel (one
// Write+Flush each); after each chunk's flush, the stream's peer address
// (the sidecar's end) is sent on flushed (while it has room).
func chunkAgent(ag *agent, first string) (chunks chan string, flushed chan string) {
	ch, flushed := make(chan string, 256), make(chan string, 256)
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/a2a/events" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":7,"result":{"status":"ok"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, first)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case c := <-ch:
				fmt.Fprint(w, c)
				w.(http.Flusher).Flush()
				select {
				case flushed <- r.RemoteAddr:
				default: // nobody is counting any more
				}
				time.Sleep(2 * time.Millisecond) // pacing the agent: separate TCP segments
			}
		}
	}
	return ch, flushed
}

// A workspace-B client never receives bytes of workspace A's effect, however
// the agent frames it (CR, CRLF split across reads, BOM, comments, data
// lines before the event line, duplicate keys, oversized events...).
func TestEventsFanoutFramingLeak(t *testing.T) {
	for _, first := range []string{
		"event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n",
		"\ufeffevent: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n",
		"",
	} {
		t.Run(fmt.Sprintf("first=%q", first[:min(len(first), 8)]), func(t *testing.T) {
			ag := startAgent(t)
			chunks, flushed := chunkAgent(ag, first)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), fanoutDirective(ag)))
			_, tokB := twoWorkspaces(t, sc, key, "SECRET-A", "req-B")
			// An unfiltered client opens the stream first (so later joiners join mid-stream).
			cAll := rawConn(t, sc)
			fmt.Fprintf(cAll, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", hostOf(sc), testReadKey)
			rdAll := bufio.NewReader(cAll)
			if _, err := http.ReadResponse(rdAll, nil); err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, rdAll)
			effA := `{"request_id": "SECRET-A", "effects": []}`
			effB := `{"request_id": "req-B", "effects": []}`
			// Pre-join noise: half an event, BOM mid-stream.
			chunks <- "\ufeffevent: supervaizer.heartbeat\ndata: x\n\n"
			chunks <- "data: partial"
			// B joins once the sidecar has read the noise, so it joins
			// mid-stream (the assertions below hold either way).
			var peer string
			for range 2 {
				select {
				case peer = <-flushed:
				case <-time.After(15 * time.Second):
					t.Fatal("the agent did not write the noise")
				}
			}
			eventually(t, 15*time.Second, "the sidecar to read the noise", func() bool {
				return readByPeer(t, portOf(t, ag.addr()), portOf(t, peer))
			})
			cB := rawConn(t, sc)
			fmt.Fprintf(cB, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\nX-Supervaize-Workspace-Authorization: Bearer %s\r\n\r\n", hostOf(sc), testReadKey, tokB)
			rdB := bufio.NewReader(cB)
			if _, err := http.ReadResponse(rdB, nil); err != nil {
				t.Fatal(err)
			}
			got := &notifyBuffer{}
			done := make(chan struct{})
			go func() { io.Copy(got, rdB); close(done) }()
			for _, seq := range [][]string{
				{" more\n\n"}, // completes the partial event started before the join
				{"event: supervaizer.effect\rdata: " + effA + "\r\r"},
				{"event: supervaizer.effect\r", "\ndata: " + effA + "\r", "\n\r", "\n"},
				{"event: supervaizer.effect\ndata: " + effA + "\n\r", "\n"},
				{"data: " + effA + "\nevent: supervaizer.effect\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"req-B\", \"request_id\": \"SECRET-A\"}\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"SECRET-A\", \"request_id\": \"req-B\"}\n\n"},
				{"event:supervaizer.effect\ndata:" + effA + "\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"SECRET\\u002dA\"}\n\n"},
				{"\ufeffevent: supervaizer.effect\ndata: " + effA + "\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"req-B\", \"x\": \"" + strings.Repeat("y", 1<<20) + "\"}\ndata: " + effA + "\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"req-B\", \"pad\": \"" + strings.Repeat("z", 1<<20+10) + "\"}\n\nevent: supervaizer.effect\ndata: " + effA + "\n\n"},
				{"event: supervaizer.effect\n", "data: " + effB[:10], effB[10:] + "\n", "\n"},
				{"event: supervaizer.effect\ndata: " + effB + "\n\n"},
				{"event: supervaizer.heartbeat\ndata: {\"status\": \"ok\"}\n\n"},
			} {
				for _, c := range seq {
					chunks <- c
				}
			}
			// The closing heartbeat reaches every client after all the events
			// before it: once B has it, B has had its chance at each of them.
			eventually(t, 20*time.Second, "the closing heartbeat at client B", func() bool {
				return strings.Contains(got.String(), `{"status": "ok"}`)
			})
			cB.Close()
			<-done
			s := got.String()
			if strings.Contains(s, "SECRET") {
				t.Errorf("workspace B received A's effect bytes: %q", s[:min(len(s), 2000)])
			}
			if strings.Count(s, "req-B") < 2 {
				t.Errorf("workspace B missed its own effects: %q", s[:min(len(s), 600)])
			}
		})
	}
}

// An effect larger than 1 MiB still reaches an unfiltered client (Studio), as
// with a proxied stream.
func TestEventsFanoutOversizedUnfiltered(t *testing.T) {
	forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) {
		ag := startAgent(t)
		events, _ := sseAgent(ag)
		sc := startSidecar(t, ag.addr(), localDirective(mode(ag)+"\t\tapi_key "+testReadKey+" read\n"))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		defer resp.Body.Close()
		readEvent(t, rd)
		big := fmt.Sprintf("event: supervaizer.effect\ndata: {\"request_id\": \"big\", \"effects\": [%q]}\n\n", strings.Repeat("e", 1<<20+100<<10))
		events <- big
		events <- effect("small")
		e := readEvent(t, rd)
		if !strings.Contains(e, `"request_id": "big"`) {
			t.Fatalf("unfiltered client lost the %d-byte effect; next event: %.100q", len(big), e)
		}
	})
}

// A filtered stream ends when its token expires (exp + leeway): it does not
// go on receiving its workspace's effects with a token new streams refuse.
func TestEventsFanoutTokenExpiry(t *testing.T) {
	forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) {
		ag := startAgent(t)
		events, _ := sseAgent(ag)
		key := newSigner(t, "k1")
		jw := startJWKS(t, key.jwk())
		dir := strings.Replace(jwksDirective(jw.url(), mode(ag)), "required on\n", "required on\n\t\t\tleeway 0s\n", 1)
		sc := startSidecar(t, ag.addr(), dir)
		long := key.mint(t, baseClaims())
		body := actionBody(t, func(r map[string]any) { r["request_id"] = "req-A"; r["action"] = "job.sync" })
		if a := decodeRPC(t, sc.rpc(t, body, long)); a.Error != nil {
			t.Fatalf("call refused: %+v", a.Error)
		}
		short := key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = time.Now().Unix() + 2 })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+short)
		defer resp.Body.Close()
		readEvent(t, rd)
		// The stream ends by itself once the token has expired.
		rest := make(chan string, 1)
		go func() { b, _ := io.ReadAll(rd); rest <- string(b) }()
		var got string
		select {
		case got = <-rest:
		case <-time.After(15 * time.Second):
			t.Fatal("the filtered stream outlived its token")
		}
		wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+short), 403, "")
		events <- effect("req-A")
		if strings.Contains(got, "req-A") {
			t.Fatalf("the expired stream carried an effect: %.80q", got)
		}
	})
}

// TestSSEFramingLFCR: an LF followed by a CR is a blank line to a browser;
// the filter splits events the same way, so another workspace's effect
// cannot ride inside an allowed event.
func TestSSEFramingLFCR(t *testing.T) { forEachEventsMode(t, testSSEFramingLFCR) }

func testSSEFramingLFCR(t *testing.T, mode func(*agent) string) {
	ag := startAgent(t)
	events, _ := sseAgent(ag)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))
	tokA, _ := twoWorkspaces(t, sc, key, "req-A", "req-B")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
	defer resp.Body.Close()
	readEvent(t, rd) // connected
	effB := fmt.Sprintf(`{"agent_slug":%q,"action":"job.sync","request_id":"req-B","effects":[]}`, testAgent)
	events <- "event: supervaizer.effect\ndata: " + effB + "\n\revent: supervaizer.heartbeat\n\n"
	events <- `event: supervaizer.effect` + "\ndata: " + `{"request_id":"req-A","request_id":"req-B"}` + "\n\n"
	events <- effect("req-A")
	got := readRaw(t, rd, "req-A")
	if strings.Contains(got, "req-B") {
		t.Fatalf("workspace A's stream carried workspace B's effect:\n%q", got)
	}
	if !strings.Contains(got, "supervaizer.heartbeat") {
		t.Fatalf("the heartbeat after LF CR was lost:\n%q", got)
	}
}

// readRaw reads the stream until marker has been seen in a complete line.
func readRaw(t *testing.T, rd *bufio.Reader, marker string) string {
	t.Helper()
	var b strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := rd.ReadString('\n')
			b.WriteString(line)
			if err != nil || strings.Contains(line, marker) {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("marker %q not seen; got %q", marker, b.String())
	}
	return b.String()
}

// TestSSEOversizedEventDropped: the tail of an event over the size bound is
// dropped with it, even when it arrives later and looks like a comment.
func TestSSEOversizedEventDropped(t *testing.T) {
	forEachEventsMode(t, testSSEOversizedEventDropped)
}

func testSSEOversizedEventDropped(t *testing.T, mode func(*agent) string) {
	ag := startAgent(t)
	events, _ := sseAgent(ag)
	flushed := make(chan string, 16) // the stream's peer (the sidecar), after each flush of the agent
	inner := ag.respond
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path == "/a2a/events" {
			w = flushNotifier{w, func() { flushed <- r.RemoteAddr }}
		}
		inner(w, r, body)
	}
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))
	tokA := key.mint(t, baseClaims())
	decodeRPC(t, sc.rpc(t, actionBody(t, func(r map[string]any) { r["request_id"] = "req-A"; r["action"] = "job.sync" }), tokA))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
	defer resp.Body.Close()
	readEvent(t, rd) // connected
	peer := <-flushed
	events <- "event: supervaizer.effect\ndata: {\"request_id\":\"req-B\",\"pad\":\"" + strings.Repeat("x", 1<<20+100)
	// The tail must arrive on its own, after the sidecar has read the
	// oversized part: wait until the agent has written it and the sidecar
	// has read every byte of it.
	select {
	case <-flushed:
	case <-time.After(15 * time.Second):
		t.Fatal("the agent did not write the oversized part")
	}
	eventually(t, 15*time.Second, "the sidecar to read the oversized part", func() bool {
		return readByPeer(t, portOf(t, ag.addr()), portOf(t, peer))
	})
	events <- "\n:\"SECRET_OF_B\"}\n\n"
	events <- effect("req-A")
	got := readRaw(t, rd, "req-A")
	if strings.Contains(got, "SECRET_OF_B") || strings.Contains(got, "xxxx") {
		t.Fatalf("part of an oversized event reached workspace A: %.200q", got)
	}
}

// TestSSE: events arrive while the stream is open, a client that goes away
// closes the upstream, and a workspace token filters effects by workspace;
// through a proxied stream per client and through the fan-out.
func TestSSE(t *testing.T) { forEachEventsMode(t, testSSE) }

func testSSE(t *testing.T, mode func(*agent) string) {
	ag := startAgent(t)
	events, closed := sseAgent(ag)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))

	t.Run("unfiltered, first event and disconnect", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
			t.Fatalf("first event %q", e)
		}
		events <- effect("anything")
		if e := readEvent(t, rd); !strings.Contains(e, `"request_id": "anything"`) {
			t.Fatalf("effect %q", e)
		}
		cancel()
		resp.Body.Close()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("upstream stream not closed after the client went away")
		}
	})

	t.Run("filtered by workspace", func(t *testing.T) {
		// Two workspaces call the agent through the gate.
		tokA := key.mint(t, baseClaims())
		tokB := key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = "workspace_B"; c["workspace_slug"] = "b" })
		callFor := func(tok, ws, reqID string) {
			body := actionBody(t, func(r map[string]any) {
				r["workspace"] = map[string]any{"id": ws}
				r["request_id"] = reqID
				r["action"] = "job.sync" // reaches the agent every time (job.start would replay)
			})
			if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
				t.Fatalf("call refused: %+v", a.Error)
			}
		}
		callFor(tokA, "workspace_123", "req-A1")
		callFor(tokB, "workspace_B", "req-B1")
		callFor(tokA, "workspace_123", "req-A2")

		_, evs := sseAgentEvents(ag)
		ctxA, cancelA := context.WithCancel(context.Background())
		defer cancelA()
		respA, rdA := openStream(t, ctxA, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
		defer respA.Body.Close()
		if e := readEvent(t, rdA); !strings.Contains(e, "supervaizer.connected") {
			t.Fatalf("first event %q", e)
		}
		for _, id := range []string{"req-B1", "req-A1", "unknown", "req-B1", "req-A2"} {
			evs <- effect(id)
		}
		evs <- "event: supervaizer.heartbeat\ndata: {\"status\": \"ok\"}\n\n"
		for _, want := range []string{"req-A1", "req-A2", "supervaizer.heartbeat"} {
			e := readEvent(t, rdA)
			if !strings.Contains(e, want) {
				t.Fatalf("workspace A stream: got %q, want %s", e, want)
			}
		}
	})

	t.Run("hundreds of concurrent streams", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tr := &http.Transport{MaxConnsPerHost: 0}
		cl := &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
		var bodies []io.Closer
		for i := 0; i < 300; i++ {
			req, _ := http.NewRequestWithContext(ctx, "GET", sc.base+"/a2a/events", nil)
			req.Header.Set("X-API-Key", testReadKey)
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			bodies = append(bodies, resp.Body)
			if e := readEvent(t, bufio.NewReader(resp.Body)); !strings.Contains(e, "supervaizer.connected") {
				t.Fatalf("stream %d first event %q", i, e)
			}
		}
		for _, b := range bodies {
			b.Close()
		}
	})

	t.Run("token refused or required", func(t *testing.T) {
		wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer junk"), 403, "")
		sc2 := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)+"		events_require_workspace_token on\n"))
		wantDetail(t, do(t, "GET", sc2.base+"/a2a/events", nil, "X-API-Key", testReadKey), 403, "")
	})
}

// flushNotifier calls flushed after each Flush of the ResponseWriter.
type flushNotifier struct {
	http.ResponseWriter
	flushed func()
}

func (f flushNotifier) Flush() {
	f.ResponseWriter.(http.Flusher).Flush()
	f.flushed()
}
