// Command demo-agent is a small stand-in for an unmodified Supervaizer v2
// agent, for `make run` and the README walk-through. It listens on
// 127.0.0.1 only and answers like the Python SDK with the shapes of the
// agent_interviewer fixture: job.start, job.sync and any other action via
// supervaizer/action.invoke, supervaizer/surface.load, its Agent Card, health,
// an SSE stream and one DataResource route. It performs no authorization
// itself: the sidecar in front of it does, and it prints the verified
// context headers it receives.
package main

import (
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/agentsse"
)

//go:embed fixture.json
var fixtureJSON []byte

type fixture struct {
	Registration json.RawMessage `json:"registration"`
	ActionResult json.RawMessage `json:"action_result"`
	SyncResult   json.RawMessage `json:"sync_result"`
}

func main() {
	addr := listenAddr()
	fx := loadFixture()
	slug := fx.slug()
	mux := newMux(fx, slug, agentCard(fx, slug, addr))
	log.Printf("demo agent %s listening on http://%s", slug, addr)
	log.Fatal(http.ListenAndServe(addr, mux))
}

// listenAddr is the -listen flag: $AGENT_ADDR (the variable the example
// Caddyfiles read) by default, else 127.0.0.1:8000.
func listenAddr() string {
	def := "127.0.0.1:8000"
	if v := os.Getenv("AGENT_ADDR"); v != "" { // the variable the example Caddyfiles read
		def = v
	}
	addr := flag.String("listen", def, "listen address (keep it on loopback; default $AGENT_ADDR, else 127.0.0.1:8000)")
	flag.Parse()
	return *addr
}

// loadFixture decodes the embedded fixture.json; a broken one stops the agent.
func loadFixture() fixture {
	var fx fixture
	if err := json.Unmarshal(fixtureJSON, &fx); err != nil {
		log.Fatal(err)
	}
	return fx
}

// slug is the agent slug of the fixture's registration ("" when absent).
func (fx fixture) slug() string {
	var reg struct {
		Agent struct {
			Slug string `json:"slug"`
		} `json:"agent"`
	}
	_ = json.Unmarshal(fx.Registration, &reg)
	return reg.Agent.Slug
}

// agentCard is the Agent Card served at /.well-known/agents/<slug>_agent.json,
// carrying the fixture's registration under both v2 keys.
func agentCard(fx fixture, slug, addr string) []byte {
	card, _ := json.Marshal(map[string]any{
		"name":        "Agent Interviewer (demo)",
		"slug":        slug,
		"version":     "1.0.0",
		"url":         "http://" + addr + "/a2a",
		"extensions":  map[string]any{"supervaizer.v2": fx.Registration},
		"supervaizer": map[string]any{"v2": fx.Registration},
	})
	return card
}

// newMux routes the agent's endpoints: health, agent list and card, /a2a,
// the SSE stream and one DataResource route.
func newMux(fx fixture, slug string, card []byte) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("/.well-known/agents.json", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"agents": []string{slug}})
	})
	mux.HandleFunc("/.well-known/agents/"+slug+"_agent.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(card)
	})
	mux.HandleFunc("/a2a", fx.handleA2A)
	mux.HandleFunc("/a2a/events", handleEvents)
	mux.HandleFunc("/api/agents/"+slug+"/data/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"items": []any{}, "workspace_id": r.Header.Get("X-Supervaize-Verified-Workspace-Id")})
	})
	return mux
}

// envelope is the part of a JSON-RPC request to /a2a the agent reads.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ActionRequest  *request `json:"action_request"`
		SurfaceRequest *request `json:"surface_request"`
	} `json:"params"`
}

// handleA2A answers POST /a2a: it logs the verified context headers and
// answers the method with the fixture's shapes, or "Method not found".
func (fx fixture) handleA2A(w http.ResponseWriter, r *http.Request) {
	var env envelope
	if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
		http.Error(w, "bad request", 400)
		return
	}
	if len(env.ID) == 0 {
		env.ID = json.RawMessage("null")
	}
	log.Printf("%s mode=%s grant=%s workspace=%s scopes=%q", env.Method,
		r.Header.Get("X-Supervaize-Verified-Mode"), r.Header.Get("X-Supervaize-Verified-Grant-Id"),
		r.Header.Get("X-Supervaize-Verified-Workspace-Id"), r.Header.Get("X-Supervaize-Verified-Scopes"))
	result, ok := fx.result(env)
	if !ok {
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found: %s"}}`, env.ID, strings.ReplaceAll(env.Method, `"`, ""))
		return
	}
	writeJSON(w, map[string]any{"jsonrpc": "2.0", "id": env.ID, "result": result})
}

// result is the JSON-RPC result for env's method, false for a method the
// agent does not know.
func (fx fixture) result(env envelope) (any, bool) {
	switch {
	case env.Method == "supervaizer/surface.load" && env.Params.SurfaceRequest != nil:
		return map[string]any{"status": "ok", "surface": env.Params.SurfaceRequest.Surface,
			"a2ui": map[string]any{"version": "v0.8", "components": []any{}}}, true
	case env.Method == "supervaizer/action.invoke" && env.Params.ActionRequest != nil:
		switch env.Params.ActionRequest.Action {
		case "job.start":
			return fx.ActionResult, true
		case "job.sync":
			return fx.SyncResult, true
		default:
			return map[string]any{"status": "ok", "effects": []any{}}, true
		}
	default:
		return nil, false
	}
}

// handleEvents serves the SSE stream: a connected event, then a heartbeat
// every 15 seconds until the client leaves (agentsse.Serve).
func handleEvents(w http.ResponseWriter, r *http.Request) {
	agentsse.Serve(w, r, 15*time.Second)
}

type request struct {
	Action  string `json:"action"`
	Surface string `json:"surface"`
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
