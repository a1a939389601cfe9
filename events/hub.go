// The events fan-out hub: one shared upstream GET /a2a/events stream per
// gate, opened on demand, read event by event and broadcast to the clients
// allowed to see each event (the client connections are in hubconn.go).

package events

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/internal/hop"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// Bounds of the events fan-out (events_fanout on).
const (
	fanoutConnectTimeout = 10 * time.Second // upstream response headers
	fanoutWriteTimeout   = 10 * time.Second // one event to one client
	fanoutQueue          = 64               // events queued per client; a client further behind is disconnected
	fanoutErrorBody      = 64 << 10         // bytes of an upstream refusal relayed to the client
)

// Hub holds at most one upstream GET /a2a/events stream and fans each
// of its complete events out to every client stream the gate allowed
// (events_fanout on). The SDK sends the same events to every subscriber
// (docs/sdk-wire.md, "SSE"), so one upstream stream serves all clients;
// workspace-filtered clients get only what Audience lets them see.
//
// Client connections are hijacked after the response head is written, so a
// client costs two small goroutines (one reading to notice the close, one
// writing its queue) instead of a proxied request with its buffers.
type Hub struct {
	url    string // the agent's /a2a/events
	client *http.Client
	memory *Memory
	learn  EffectLearner // nil: nothing learned (SetLearner)
	log    *zap.Logger
	count  func(event string) // metrics: see metrics.fanout
	// writeTimeout bounds one write to a client and one broadcast's wait
	// for clients behind (fanoutWriteTimeout).
	writeTimeout time.Duration

	mu      sync.Mutex
	closed  bool
	current *Stream     // nil when no upstream stream is open
	dialing *fanoutDial // non-nil while one join opens the upstream stream
}

// fanoutDial is one attempt to open the upstream stream; waiters read its
// result once done is closed.
type fanoutDial struct {
	done   chan struct{}
	stream *Stream
	fail   *Refusal
}

// Refusal is what a client gets when the upstream stream cannot be
// opened: the agent's own non-SSE answer, or 502/504.
type Refusal struct {
	Status      int
	ContentType string
	Body        []byte
	// unfilterable: the agent's answer was an event stream the hub cannot
	// read (encoded); status is 502, for every client.
	Unfilterable bool
}

// Stream is one open upstream stream and its clients.
type Stream struct {
	hub    *Hub
	body   io.ReadCloser
	cancel context.CancelFunc
	header http.Header // the upstream's response headers, hop-by-hop removed

	mu        sync.Mutex
	ended     bool
	greeting  []byte // the upstream's supervaizer.connected event, sent to each joiner
	clients   map[*fanoutClient]struct{}
	oversized bool // an oversized event is being passed on in pieces
}

func NewHub(baseURL string, memory *Memory, log *zap.Logger, count func(event string)) *Hub {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true // the events are relayed byte for byte
	tr.ResponseHeaderTimeout = fanoutConnectTimeout
	tr.MaxIdleConnsPerHost = 1
	return &Hub{
		url:    baseURL + "/a2a/events",
		client: &http.Client{Transport: tr},
		memory: memory,
		log:    log,
		count:  count,

		writeTimeout: fanoutWriteTimeout,
	}
}

// join returns the open upstream stream, opening it with apiKey (a key the
// gate accepted with read scope) when none is open. Concurrent joins share
// one attempt. It returns a refusal to relay when the stream cannot be
// opened: the agent's non-200 or non-SSE answer (status, Content-Type and
// at most fanoutErrorBody bytes of its body; a 2xx of it is 502 to a
// filtered client, see streamEvents), 502 when the agent cannot be reached
// or answers an encoded stream (Content-Encoding other than identity), 504
// when it does not answer within fanoutConnectTimeout, 503 once the hub is
// closed (configuration reload or stop).
func (h *Hub) Join(ctx context.Context, apiKey string) (*Stream, *Refusal) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, &Refusal{Status: http.StatusServiceUnavailable}
	}
	if s := h.current; s != nil {
		h.mu.Unlock()
		return s, nil
	}
	d := h.dialing
	if d == nil {
		d = &fanoutDial{done: make(chan struct{})}
		h.dialing = d
		go h.dial(d, apiKey)
	}
	h.mu.Unlock()
	wait := time.NewTimer(2*fanoutConnectTimeout + time.Second) // headers, then a refusal's body
	defer wait.Stop()
	select {
	case <-d.done:
		return d.stream, d.fail
	case <-ctx.Done():
	case <-wait.C:
	}
	return nil, &Refusal{Status: http.StatusGatewayTimeout}
}

// dial opens the upstream stream for d and starts reading it.
func (h *Hub) dial(d *fanoutDial, apiKey string) {
	defer close(d.done)
	s, fail := h.open(apiKey)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dialing = nil
	if fail != nil {
		h.count("upstream_refused")
		d.fail = fail
		return
	}
	if h.closed {
		s.cancel()
		_ = s.body.Close()
		d.fail = &Refusal{Status: http.StatusServiceUnavailable}
		return
	}
	h.current, d.stream = s, s
	h.count("upstream_open")
	go s.read()
	// Every waiter may have gone meanwhile: a stream nobody joined closes.
	time.AfterFunc(fanoutConnectTimeout, s.EndIfIdle)
}

func (h *Hub) open(apiKey string) (*Stream, *Refusal) {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		cancel()
		return nil, &Refusal{Status: http.StatusBadGateway}
	}
	req.Header.Set("X-Api-Key", apiKey)
	req.Header.Set("Accept", "text/event-stream")
	// No Accept-Encoding (a new request, and DisableCompression keeps the
	// transport from adding one): the hub reads events, never compressed bytes.
	resp, err := h.client.Do(req)
	if err != nil {
		cancel()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, &Refusal{Status: http.StatusGatewayTimeout}
		}
		h.log.Warn("events fan-out: agent event stream unavailable", zap.String("error", redact.URLsIn(err.Error())))
		return nil, &Refusal{Status: http.StatusBadGateway}
	}
	if resp.StatusCode < 200 { // an interim or switching answer: not a stream, not relayed
		resp.Body.Close()
		cancel()
		h.log.Warn("events fan-out: the agent answered /a2a/events with " + strconv.Itoa(resp.StatusCode))
		return nil, &Refusal{Status: http.StatusBadGateway}
	}
	if !IsStream(resp.StatusCode, resp.Header) {
		stop := time.AfterFunc(fanoutConnectTimeout, func() { cancel(); resp.Body.Close() }) // bounds a slow refusal body
		body, _ := io.ReadAll(io.LimitReader(resp.Body, fanoutErrorBody))
		stop.Stop()
		resp.Body.Close()
		cancel()
		return nil, &Refusal{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body}
	}
	if !hop.IdentityEncoding(resp.Header) {
		// Not asked for (no Accept-Encoding, see NewHub), and not
		// readable: the hub frames events, it does not decode bodies.
		resp.Body.Close()
		cancel()
		h.log.Warn("events fan-out: the agent's event stream is encoded (Content-Encoding " +
			strconv.Quote(resp.Header.Get("Content-Encoding")) + "): not relayed")
		return nil, &Refusal{Status: http.StatusBadGateway, Unfilterable: true}
	}
	header := resp.Header.Clone()
	hop.RemoveFromCopy(header) // one head shared by every client: no hop-by-hop header, length, date or cookie
	return &Stream{hub: h, body: resp.Body, cancel: cancel, header: header,
		clients: map[*fanoutClient]struct{}{}}, nil
}

// close ends the hub: the open stream, its clients, and every later join
// (503). Called by Handler.Cleanup.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	s := h.current
	h.mu.Unlock()
	if s != nil {
		s.end()
	}
}

// read relays the upstream stream until it ends, then ends every client.
func (s *Stream) read() {
	defer s.end()
	var fr Framer
	buf := make([]byte, 32<<10)
	emit := func(event []byte) error {
		s.broadcast(append([]byte(nil), event...))
		return nil
	}
	oversized := func(piece []byte, end bool) error {
		s.broadcastPiece(append([]byte(nil), piece...), end)
		return nil
	}
	for {
		n, err := s.body.Read(buf)
		if n > 0 {
			_ = fr.Feed(buf[:n], emit, oversized)
		}
		if err != nil {
			return
		}
	}
}

// broadcast queues one complete event (not modified afterwards) for every
// client allowed to see it; the first supervaizer.connected event becomes
// the greeting of later joiners.
func (s *Stream) broadcast(event []byte) {
	name, all, ws, data := audience(event, s.hub.memory)
	if data != nil && s.hub.learn != nil {
		s.hub.learn(ws, data) // once per event, before any client reads it
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.greeting == nil && name == "supervaizer.connected" {
		s.greeting = event
	}
	var r sendRound
	defer r.stop()
	for c := range s.clients {
		if all || c.workspace == "" || c.workspace == ws {
			s.sendLocked(c, event, &r)
		}
	}
}

// broadcastPiece queues one piece of an oversized event for the unfiltered
// clients that saw its start (filtered clients never get it: it cannot be
// judged whole); end marks its last piece.
func (s *Stream) broadcastPiece(piece []byte, end bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r sendRound
	defer r.stop()
	for c := range s.clients {
		if c.workspace == "" && !c.midEvent && len(piece) > 0 {
			s.sendLocked(c, piece, &r)
		}
	}
	s.oversized = !end
	if end {
		for c := range s.clients {
			c.midEvent = false
		}
	}
}

// sendRound bounds the time one broadcast waits for clients whose queue is
// full: the hub's writeTimeout in all, however many they are.
type sendRound struct {
	timer   *time.Timer
	expired bool
}

func (r *sendRound) stop() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

// sendLocked queues event for c. When c's queue is full it waits, within
// the round's time, for c to take it (the agent's stream waits meanwhile);
// a client still behind then is dropped from the stream and disconnected.
// s.mu is held.
func (s *Stream) sendLocked(c *fanoutClient, event []byte, r *sendRound) {
	select {
	case c.queue <- event:
		return
	case <-c.done:
		return
	default:
	}
	if !r.expired {
		if r.timer == nil {
			r.timer = time.NewTimer(s.hub.writeTimeout)
		}
		select {
		case c.queue <- event:
			return
		case <-c.done:
			return
		case <-r.timer.C:
			r.expired = true
		}
	}
	delete(s.clients, c)
	s.hub.count("client_behind")
	s.hub.count("client_leave")
	go func() {
		c.close()
		s.EndIfIdle()
	}()
}

// end closes the upstream stream and every client, once. The hub forgets
// the stream first, so that a join meanwhile opens a new one.
func (s *Stream) end() {
	h := s.hub
	h.mu.Lock()
	if h.current == s {
		h.current = nil
	}
	h.mu.Unlock()

	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	clients := s.clients
	s.clients = nil
	s.mu.Unlock()

	h.count("upstream_end")
	s.cancel()
	_ = s.body.Close()
	for c := range clients {
		h.count("client_leave")
		go c.close() // concurrently: a TLS close may wait for its peer
	}
}

// add registers c, a client of this stream: it first gets the greeting
// (when the upstream already sent one), then every event it may see. It
// returns false when the stream has ended meanwhile, and true without adding
// a client already closed (its token expired before it joined).
func (s *Stream) add(c *fanoutClient) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	select {
	case <-c.done: // closed before it joined (its token expired): not added
		return true
	default:
	}
	c.midEvent = s.oversized
	if s.greeting != nil {
		c.queue <- s.greeting // empty queue: never blocks
	}
	s.clients[c] = struct{}{}
	s.hub.count("client_join")
	return true
}

// remove forgets c; the upstream stream closes with its last client.
func (s *Stream) remove(c *fanoutClient) {
	s.mu.Lock()
	if _, ok := s.clients[c]; !ok {
		s.mu.Unlock()
		return
	}
	delete(s.clients, c)
	s.hub.count("client_leave")
	last := len(s.clients) == 0
	s.mu.Unlock()
	if last {
		s.end()
	}
}

// EndIfIdle closes the upstream stream when no client holds it (a join
// whose client could not be served, or a stream nobody joined).
func (s *Stream) EndIfIdle() {
	s.mu.Lock()
	idle := !s.ended && len(s.clients) == 0
	s.mu.Unlock()
	if idle {
		s.end()
	}
}

// SetLearner has learn receive every effect attributed to a workspace,
// once per event (set before the hub is used).
func (h *Hub) SetLearner(learn EffectLearner) { h.learn = learn }
