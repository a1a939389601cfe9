package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// startResult is what the fake agent answers to job.start: the fixture's
// action_result.
func startResult(t *testing.T) json.RawMessage {
	var f struct {
		ActionResult json.RawMessage `json:"action_result"`
	}
	b, _ := osReadFile("testdata/agent_interviewer_mvp.json")
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.ActionResult
}

// jobStartAgent answers every /a2a call with the fixture's job.start result
// (or status 500 while fail is true), after gate (if set) lets it go.
type jobStartAgent struct {
	*agent
	mu   sync.Mutex
	gate chan struct{}
	fail bool
}

// startJobStartAgent starts a jobStartAgent (the agent counts the calls it
// receives).
func startJobStartAgent(t *testing.T) *jobStartAgent {
	j := &jobStartAgent{agent: startAgent(t)}
	result := startResult(t)
	j.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		j.mu.Lock()
		gate, fail := j.gate, j.fail
		j.mu.Unlock()
		if gate != nil {
			<-gate
		}
		if fail {
			http.Error(w, "boom", 500)
			return
		}
		var env struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(body, &env)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, env.ID, result)
	}
	return j
}

// withID sets the JSON-RPC id of a fixture body.
func withID(body []byte, id string) []byte {
	return []byte(strings.Replace(string(body), `"id":7`, `"id":`+id, 1))
}

// idemDirective is jwksDirective with an idempotency block holding extra.
func idemDirective(jwksURL, extra string) string {
	return jwksDirective(jwksURL, "		idempotency {\n"+extra+"		}\n")
}

// resultOf decodes the result of an answer.
func resultOf(t *testing.T, r response) map[string]any {
	t.Helper()
	a := decodeRPC(t, r)
	if a.Error != nil {
		t.Fatalf("JSON-RPC error: %s", r.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(a.Result, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
