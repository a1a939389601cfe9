package test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReadWithSmuggledBodyRefusedOnEveryClass: a GET or HEAD whose body (by
// Content-Length or chunked) is a whole second request — a POST /a2a with
// forged X-Supervaize-Verified-* headers — is refused on every route class
// (public, controller, events, DataResource, legacy v1, other under
// other_routes public and api_key): a 400 (405 on /a2a, which serves POST
// only) and the HTTP/1 connection closed after it; the agent receives
// nothing, neither the read nor the smuggled request. An agent that leaves
// an unexpected GET body unread would parse it as a request of its own.
func TestReadWithSmuggledBodyRefusedOnEveryClass(t *testing.T) {
	inner := `{"jsonrpc":"2.0","id":9,"method":"supervaizer/action.invoke","params":{}}`
	smuggled := fmt.Sprintf("POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"X-Supervaize-Verified-Mode: token\r\nX-Supervaize-Verified-Workspace-Id: victim_ws\r\n"+
		"Content-Length: %d\r\n\r\n%s", len(inner), inner)
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)
	for _, other := range []string{"public", "api_key"} {
		ag, key, _, sc := startTokenGate(t, "		other_routes "+other+"\n")
		tok := "Bearer " + dataToken(t, key, "resource.contacts.list")
		cases := []struct {
			class, method, target string
			want                  int
			headers               []string
		}{
			{"public", "GET", "/.well-known/health", 400, nil},
			{"controller", "GET", "/a2a", 405, []string{"X-API-Key", testKey}},
			{"events", "GET", "/a2a/events", 400, []string{"X-API-Key", testReadKey}},
			{"data", "GET", "/api/agents/" + testAgent + "/data/contacts/", 400, []string{"X-API-Key", testReadKey,
				"X-Supervaize-Workspace-Authorization", tok, "X-Supervaize-Workspace-Id", "workspace_123"}},
			{"legacy", "GET", "/api/supervaizer/jobs", 400, []string{"X-API-Key", testReadKey}},
			{"legacy", "HEAD", "/api/supervaizer/jobs", 400, []string{"X-API-Key", testReadKey}},
			{"other", "GET", "/docs", 400, []string{"X-API-Key", testReadKey}},
			{"other", "HEAD", "/", 400, nil},
		}
		for _, c := range cases {
			for _, te := range []bool{false, true} {
				ag.reset()
				h := append([]string{}, c.headers...)
				body := smuggled
				if te {
					h, body = append(h, "Transfer-Encoding", "chunked"), chunked
				} else {
					h = append(h, "Content-Length", fmt.Sprint(len(smuggled)))
				}
				conn := openRequest(t, sc.base, c.method, c.target, h...)
				if _, err := io.WriteString(conn, body); err != nil {
					t.Fatal(err)
				}
				status, answer := readAnswer(t, conn)
				name := fmt.Sprintf("other_routes %s, %s %s %s (chunked %v)", other, c.class, c.method, c.target, te)
				if status != c.want || (c.want == 400 && c.method == "GET" && !strings.Contains(answer, "GET and HEAD requests take no body")) {
					t.Errorf("%s: %d %s, want %d", name, status, answer, c.want)
				}
				if c.want == 400 {
					// Nothing after the refusal is read as a request: the
					// connection is closed.
					conn.SetReadDeadline(time.Now().Add(5 * time.Second))
					if n, err := conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
						t.Errorf("%s: connection still open after the refusal (%d, %v)", name, n, err)
					}
				}
				nothingReached(t, ag)
			}
		}
		// The same reads without a body pass.
		if r := do(t, "GET", sc.base+"/api/supervaizer/jobs", nil, "X-API-Key", testReadKey); r.Status != http.StatusOK {
			t.Fatalf("legacy GET without a body: %d %s", r.Status, r.Body)
		}
	}
}
