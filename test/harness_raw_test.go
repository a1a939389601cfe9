package test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostOf is the sidecar's host:port.
func hostOf(sc *sidecar) string { return strings.TrimPrefix(sc.base, "http://") }

// rawConn dials the sidecar.
func rawConn(t *testing.T, sc *sidecar) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", hostOf(sc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// drainUntilClosed reads the connection until EOF/reset; fails if still open after d.
func drainUntilClosed(t *testing.T, c net.Conn, rd io.Reader, d time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b strings.Builder
	_, err := io.Copy(&b, rd)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after %v; got %q", d, b.String())
	}
	return b.String()
}

// rawExchange writes raw bytes to the sidecar and returns the status line
// of the (first final) answer.
func rawExchange(t *testing.T, base, raw string, pause time.Duration, rest string) string {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	if pause > 0 {
		time.Sleep(pause) // pacing the sender: the rest of the request comes later
		conn.Write([]byte(rest))
	}
	rd := bufio.NewReader(conn)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return "EOF"
		}
		if !strings.HasPrefix(line, "HTTP/1.") || strings.HasPrefix(line, "HTTP/1.1 100") {
			continue // interim answers and their blank lines
		}
		return strings.TrimSpace(line)
	}
}

// rawRequest sends one HTTP/1.1 request as raw bytes (so no client library
// normalizes the path) and returns the status code.
func rawRequest(t *testing.T, base, method, target string, headers ...string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, strings.TrimPrefix(base, "http://"))
	body := ""
	if method == "POST" {
		body = "{}"
	}
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// readByPeer reports whether every byte written on the loopback TCP
// connection from port from to port to has been read by the process at the
// other end: nothing waits in the writer's send queue nor in the reader's
// receive queue (from /proc/net/tcp). A test polls it (eventually) to learn
// that the sidecar has consumed what an agent wrote, an event no answer
// shows. Where /proc/net/tcp cannot be read (not Linux) it reports true at
// once: the tests using it assert what holds in either order, the wait
// only makes the order they mean to exercise certain.
func readByPeer(t *testing.T, from, to int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Logf("cannot see TCP queues (%v): not waiting for the read", err)
		return true
	}
	port := func(addr string) int {
		_, hex, _ := strings.Cut(addr, ":")
		p, _ := strconv.ParseInt(hex, 16, 32)
		return int(p)
	}
	queue := func(q string, rx bool) int64 {
		tx, rxq, _ := strings.Cut(q, ":")
		s := tx
		if rx {
			s = rxq
		}
		n, _ := strconv.ParseInt(s, 16, 64)
		return n
	}
	sent, received := false, false
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		switch local, remote := port(f[1]), port(f[2]); {
		case local == from && remote == to:
			sent = queue(f[4], false) == 0
		case local == to && remote == from:
			received = queue(f[4], true) == 0
		}
	}
	return sent && received
}

// portOf is the port of a host:port address.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
