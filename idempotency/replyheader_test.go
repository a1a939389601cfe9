package idempotency

import (
	"context"
	"encoding/json"
	"testing"
)

// TestRecordDropsCopyHeaders: a recorded answer keeps the agent's own
// headers but none that no copy of an answer may carry (hop.RemoveFromCopy):
// hop-by-hop headers, those the agent's Connection names, Content-Length,
// Date, and Set-Cookie, which was recorded and replayed before (a first
// caller's cookie handed to every retry and kept in the store up to TTL).
func TestRecordDropsCopyHeaders(t *testing.T) {
	f := loadFixture(t)
	a := newAgent(f.Result)
	a.setAnswer(func(_ int64, _ context.Context, id json.RawMessage) (Response, error) {
		resp := okResponse(id, f.Result)
		for name, v := range map[string]string{
			"Set-Cookie": "session=first-caller", "Date": "Mon, 01 Jan 2024 00:00:00 GMT",
			"Alt-Svc": `h3=":443"`, "Proxy-Authenticate": "Basic", "Keep-Alive": "timeout=5",
			"Connection": "X-Hop", "X-Hop": "1",
		} {
			resp.Header.Set(name, v)
		}
		return resp, nil
	})
	g := New(NewMemoryStore(MemoryOptions{}), Options{})
	req1 := f.request(t, `1`)
	first := mustDo(t, g, req1, a.forward(req1))
	req2 := f.request(t, `2`)
	second := mustDo(t, g, req2, a.forward(req2))
	if !second.Replayed {
		t.Fatalf("second reply not a replay: %+v", second)
	}
	for _, rep := range []Reply{first, second} {
		if len(rep.Header) != 2 || rep.Header.Get("Content-Type") != "application/json" ||
			rep.Header.Get("X-Agent") != "interviewer" {
			t.Errorf("reply headers %v, want Content-Type and X-Agent only", rep.Header)
		}
	}
}
