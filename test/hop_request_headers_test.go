package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestExpectContinueAnsweredOnce: a client sending Expect: 100-continue on
// /a2a (curl does for bodies over 1 KiB) gets one 100 Continue, from the
// sidecar, then the agent's answer; the agent receives no Expect (it would
// answer 100 Continue again, relayed by the proxy) and no TE.
func TestExpectContinueAnsweredOnce(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective(""))
	body := jobStartBody(t)
	for _, path := range []string{"/a2a", "/api/supervaizer/agents"} {
		ag.reset()
		conn, err := net.Dial("tcp", strings.TrimPrefix(sc.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\nExpect: 100-continue\r\nTE: trailers\r\nConnection: close\r\n\r\n", path, strings.TrimPrefix(sc.base, "http://"), testKey, len(body))
		rd := bufio.NewReader(conn)
		first, err := rd.ReadString('\n')
		if err != nil || !strings.HasPrefix(first, "HTTP/1.1 100") {
			more, _ := io.ReadAll(rd)
			t.Logf("%s", more)
			conn.Close()
			t.Fatalf("%s: first line %q (%v), want 100 Continue before the body", path, first, err)
		}
		if _, err := conn.Write(body); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(rd)
		conn.Close()
		all := first + string(rest)
		if n := strings.Count(all, "HTTP/1.1 100 Continue"); n != 1 {
			t.Errorf("%s: %d interim 100 Continue answers, want 1:\n%s", path, n, all)
		}
		if !strings.Contains(all, "HTTP/1.1 200") {
			t.Errorf("%s: no final 200:\n%s", path, all)
		}
		got := ag.last(t)
		if v := got.Header.Values("Expect"); len(v) > 0 {
			t.Errorf("%s: the agent received Expect %q", path, v)
		}
		if v := got.Header.Values("Te"); len(v) > 0 {
			t.Errorf("%s: the agent received TE %q", path, v)
		}
	}
}
