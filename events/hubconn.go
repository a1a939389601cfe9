// The events fan-out's client side: taking over an HTTP/1.x connection,
// writing its response head by hand, and one client's writer and watcher
// goroutines (the hub and its upstream stream are in hub.go).

package events

import (
	"bufio"
	"context"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// fanoutClient is one hijacked client connection.
type fanoutClient struct {
	conn      net.Conn
	workspace string // "" for an unfiltered stream
	queue     chan []byte
	done      chan struct{}
	once      sync.Once
	stream    atomic.Pointer[Stream] // the stream it joins
	expiry    *time.Timer            // closes a filtered client when its token expires
	// midEvent: joined while an oversized event was being passed on: its
	// remaining pieces are not sent to this client.
	midEvent bool
}

// Serve takes over the client connection of w (HTTP/1.x), writes the
// response head (200, the upstream's headers over those already set on w,
// e.g. Caddy's Server, and Connection: close: the body ends when the
// connection does) and joins the client to s, or, when s ended meanwhile,
// to the stream a new join with apiKey returns (a client that cannot join
// is disconnected: an ended stream, as when the agent ends it). A filtered
// client (workspace not "") is disconnected at until, when its token stops
// being valid. It returns false, having written
// nothing, when w cannot be taken over.
func (h *Hub) Serve(w http.ResponseWriter, s *Stream, apiKey, workspace string, until time.Time) bool {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	_ = conn.SetDeadline(time.Time{})
	_ = conn.SetWriteDeadline(time.Now().Add(h.writeTimeout))
	c := &fanoutClient{conn: conn, workspace: workspace,
		queue: make(chan []byte, fanoutQueue), done: make(chan struct{})}
	c.stream.Store(s)
	if workspace != "" {
		c.expiry = time.AfterFunc(time.Duration(math.MaxInt64), c.close)
		c.expiry.Reset(time.Until(until)) // after the assignment: close reads c.expiry
	}
	if writeFanoutHead(brw.Writer, w.Header(), s.header) != nil {
		c.close()
		return true
	}
	for !s.add(c) {
		// The stream ended between the join and now (its last client left,
		// or the agent ended it): join the next one, once.
		ctx, cancel := context.WithTimeout(context.Background(), 2*fanoutConnectTimeout)
		next, fail := h.Join(ctx, apiKey)
		cancel()
		if fail != nil || next == s {
			c.close()
			return true
		}
		s = next
		c.stream.Store(s)
	}
	extra := brw.Reader.Buffered() > 0 // bytes after the request: not an SSE client
	go c.write()
	if extra {
		c.close()
	} else {
		go c.watch()
	}
	return true
}

// writeFanoutHead writes and flushes the response head of a taken-over
// client, by hand (the connection is no longer net/http's): 200, the
// upstream's headers over before (those set on w before the take-over),
// a fresh Date, and Connection: close (the body ends when the connection
// does).
func writeFanoutHead(bw *bufio.Writer, before, upstream http.Header) error {
	head := before.Clone()
	for name, values := range upstream {
		head[name] = values
	}
	head.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	head.Set("Connection", "close")
	_, _ = bw.WriteString("HTTP/1.1 200 OK\r\n")
	_ = head.Write(bw)
	_, _ = bw.WriteString("\r\n")
	return bw.Flush()
}

// write sends the client's queue until the client is closed.
func (c *fanoutClient) write() {
	for {
		select {
		case event := <-c.queue:
			_ = c.conn.SetWriteDeadline(time.Now().Add(c.stream.Load().hub.writeTimeout))
			if _, err := c.conn.Write(event); err != nil {
				c.close()
				return
			}
		case <-c.done:
			return
		}
	}
}

// watch notices the client going away: anything it sends after its request
// (nothing, for an SSE client) or the end of the connection closes it.
func (c *fanoutClient) watch() {
	var b [1]byte
	_, _ = c.conn.Read(b[:])
	c.close()
}

// close disconnects the client and leaves the stream, once.
func (c *fanoutClient) close() {
	c.once.Do(func() {
		close(c.done)
		if c.expiry != nil {
			c.expiry.Stop()
		}
		_ = c.conn.Close()
		if s := c.stream.Load(); s != nil {
			s.remove(c)
		}
	})
}
