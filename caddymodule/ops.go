package caddymodule

import (
	"context"
	"net/http"
	"time"
)

// Paths the sidecar answers itself (never forwarded to the agent).
const (
	pathLive    = "/_sidecar/live"    // liveness: 200 while the process serves
	pathReady   = "/_sidecar/ready"   // readiness: 200 once keys and contracts are loaded, else 503
	pathStatus  = "/_sidecar/status"  // operator status (read API key): mode, JWKS, contracts
	pathRefresh = "/_sidecar/refresh" // POST (write API key): read every agent card now
)

// serveOps answers the sidecar's own endpoints, matched on the exact escaped
// path (live, ready and status take GET or HEAD, refresh takes POST; another
// method is 405); ok is false for any other path.
func (g *gate) serveOps(w http.ResponseWriter, r *http.Request) (ok bool, err error) {
	path := r.URL.EscapedPath()
	switch path {
	case pathLive, pathReady, pathStatus:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return true, writeDetail(w, http.StatusMethodNotAllowed, statusDetail(http.StatusMethodNotAllowed))
		}
	case pathRefresh:
	default:
		return false, nil
	}
	switch path {
	case pathLive:
		return true, writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	case pathReady:
		ready, reasons := g.ready()
		status := http.StatusOK
		if !ready {
			status = http.StatusServiceUnavailable
		}
		body := map[string]any{"ready": ready, "waiting_for": reasons}
		if notes := g.introspectionNotes(); notes != nil {
			body["notes"] = notes
		}
		return true, writeJSON(w, status, body)
	case pathRefresh:
		if r.Method != http.MethodPost {
			return true, writeDetail(w, http.StatusMethodNotAllowed, statusDetail(http.StatusMethodNotAllowed))
		}
		if st, detail, _ := g.checkAPIKey(r.Header.Values(headerAPIKey), "write"); st != 0 {
			return true, writeDetail(w, st, detail)
		}
		if g.contracts == nil {
			return true, writeDetail(w, http.StatusNotFound, "registration is off")
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		errs := map[string]string{}
		for _, slug := range g.contracts.Slugs() {
			if err := g.contracts.Refresh(ctx, slug); err != nil {
				errs[slug] = err.Error()
			}
		}
		return true, writeJSON(w, http.StatusOK, map[string]any{"refreshed": g.contracts.Slugs(), "errors": errs})
	case pathStatus:
		if st, detail, _ := g.checkAPIKey(r.Header.Values(headerAPIKey), "read"); st != 0 {
			return true, writeDetail(w, st, detail)
		}
		return true, writeJSON(w, http.StatusOK, g.status())
	}
	return false, nil
}

// ready is the readiness signal: keys loaded (PEM parsed, or a JWKS fetched
// once) and, with a registration source, every agent's card read.
func (g *gate) ready() (bool, []string) {
	var waiting []string
	if g.verifier != nil && !g.verifier.Ready() {
		waiting = append(waiting, "jwks")
	}
	if g.contracts != nil {
		for slug, st := range g.contracts.Status() {
			if !st.Ready {
				waiting = append(waiting, "agent_card:"+slug)
			}
		}
	}
	return len(waiting) == 0, waiting
}

// status is the operator view: no secrets, no tokens.
func (g *gate) status() map[string]any {
	ready, waiting := g.ready()
	out := map[string]any{"mode": g.modeName(), "server_id": g.serverID, "ready": ready, "waiting_for": waiting}
	if g.verifier != nil {
		if loaded, last, lastErr, ok := g.verifier.JWKSStatus(); ok {
			j := map[string]any{"loaded": loaded}
			if !last.IsZero() {
				j["last_good_refresh"] = last.UTC().Format(time.RFC3339)
			}
			if lastErr != nil {
				j["last_error"] = lastErr.Error()
			}
			out["jwks"] = j
		}
	}
	if g.contracts != nil {
		out["contracts"] = g.contracts.Status()
	}
	if g.intro != nil {
		out["introspection"] = g.introspectionStatus()
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, _ := jsonMarshal(v)
	return writeBody(w, status, b)
}
