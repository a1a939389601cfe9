package events

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// testHub is a hub without an upstream URL, counting nothing.
func testHub() *Hub {
	return &Hub{memory: NewMemory(), log: zap.NewNop(), count: func(string) {},
		writeTimeout: 200 * time.Millisecond}
}

// testStream is an open fan-out stream without an upstream connection.
func testStream(h *Hub) *Stream {
	s := &Stream{hub: h, body: io.NopCloser(strings.NewReader("")), cancel: func() {},
		clients: map[*fanoutClient]struct{}{}}
	h.current = s
	return s
}

// pipeClient adds a client whose connection is one end of a net.Pipe and
// starts its writer; it returns the other end.
func pipeClient(t *testing.T, s *Stream, workspace string) (*fanoutClient, net.Conn) {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { client.Close() })
	c := &fanoutClient{conn: server, workspace: workspace,
		queue: make(chan []byte, fanoutQueue), done: make(chan struct{})}
	c.stream.Store(s)
	if !s.add(c) {
		t.Fatal("stream ended")
	}
	go c.write()
	return c, client
}

func closedWithin(c *fanoutClient, d time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(d):
		return false
	}
}

// A client that does not read is disconnected (its queue full past the
// write timeout, or its write deadline passed); a reading client gets every
// event and stays.
func TestFanoutSlowClientDisconnected(t *testing.T) {
	h := testHub()
	h.writeTimeout = time.Second // the reading client is never that late, even on a loaded machine
	var left atomic.Int64
	h.count = func(event string) {
		if event == "client_leave" {
			left.Add(1)
		}
	}
	s := testStream(h)
	fast, fastPeer := pipeClient(t, s, "")
	slow, _ := pipeClient(t, s, "") // never read: its writer blocks on the first event
	event := []byte("event: supervaizer.heartbeat\ndata: {\"status\": \"ok\"}\n\n")
	// The reading client drains its connection all along.
	var got atomic.Int64
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := fastPeer.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	sent := 0
	for ; sent < 4*fanoutQueue && !closedWithin(slow, 0); sent++ {
		s.broadcast(append([]byte(nil), event...))
	}
	want := int64(sent * len(event))
	for deadline := time.Now().Add(10 * time.Second); got.Load() < want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if got.Load() != want {
		t.Fatalf("the reading client got %d bytes of %d events, want %d", got.Load(), sent, want)
	}
	if !closedWithin(slow, 10*time.Second) {
		t.Fatalf("a client that reads nothing was not disconnected after %d events", sent)
	}
	// Dropped by a full queue or by its write deadline, whichever came first;
	// it leaves the stream just after its connection closes.
	for deadline := time.Now().Add(10 * time.Second); left.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if left.Load() != 1 {
		t.Fatalf("client_leave counted %d times, want 1", left.Load())
	}
	s.mu.Lock()
	_, fastIn := s.clients[fast]
	_, slowIn := s.clients[slow]
	s.mu.Unlock()
	if !fastIn || slowIn {
		t.Fatalf("clients after the overflow: fast %v slow %v, want fast only", fastIn, slowIn)
	}
}

// Closing the hub (Handler.Cleanup) disconnects every client and refuses
// later joins with 503.
func TestFanoutHubClose(t *testing.T) {
	h := testHub()
	s := testStream(h)
	c, peer := pipeClient(t, s, "workspace_1")
	h.Close()
	if !closedWithin(c, 10*time.Second) {
		t.Fatal("client still connected after the hub closed")
	}
	if _, err := peer.Read(make([]byte, 1)); err == nil {
		t.Fatal("the client's connection is still open")
	}
	if _, fail := h.Join(t.Context(), "key"); fail == nil || fail.Status != http.StatusServiceUnavailable {
		t.Fatalf("join after close: %+v, want 503", fail)
	}
}

// A workspace-filtered client gets connected and heartbeat events and only
// its own workspace's effects.
func TestFanoutFiltersByWorkspace(t *testing.T) {
	h := testHub()
	h.memory.Remember("req-A", "ws_A")
	h.memory.Remember("req-B", "ws_B")
	s := testStream(h)
	_, peer := pipeClient(t, s, "ws_A")
	effect := func(id string) []byte {
		return []byte("event: supervaizer.effect\ndata: {\"request_id\": \"" + id + "\"}\n\n")
	}
	for _, e := range [][]byte{effect("req-B"), effect("unknown"), effect("req-A"),
		[]byte("event: supervaizer.heartbeat\ndata: {}\n\n")} {
		s.broadcast(e)
	}
	want := string(effect("req-A")) + "event: supervaizer.heartbeat\ndata: {}\n\n"
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != want {
		t.Fatalf("filtered client got %q (%v), want %q", buf, err, want)
	}
}
