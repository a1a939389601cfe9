// The sidecar's own endpoints (/_sidecar/*): their rows of the route table
// and their answers: liveness, readiness, status, refresh.

package gate

import (
	"context"
	"net/http"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// Paths the sidecar answers itself (never forwarded to the agent).
const (
	pathLive    = "/_sidecar/live"    // liveness: 200 while the process serves
	pathReady   = "/_sidecar/ready"   // readiness: 200 once keys and contracts are loaded, else 503
	pathStatus  = "/_sidecar/status"  // operator status (read API key): mode, JWKS, contracts
	pathRefresh = "/_sidecar/refresh" // POST (write API key): read the JWKS and every agent card now
)

// opsRoutes are the sidecar's own endpoints, matched on the exact escaped
// path; their rows of the route table (routePolicies) give the methods,
// the key scope and the answer.
var opsRoutes = map[string]routeClass{pathLive: classLive, pathReady: classReady, pathStatus: classStatus, pathRefresh: classRefresh}

// serveOps answers the sidecar's own endpoints by their rows of the route
// table: another method is 405, a GET or HEAD with a body 400, then the
// key when the row needs one, then the row's answer. Serve calls it for
// the exact paths of opsRoutes only (another /_sidecar path is
// classifyRoute's 404).
func (g *Gate) serveOps(w http.ResponseWriter, r *http.Request, class routeClass) error {
	p := &routePolicies[class]
	switch {
	case !p.serves(r.Method):
		return writeDetail(w, http.StatusMethodNotAllowed, statusDetail(http.StatusMethodNotAllowed))
	case bodyOnRead(r):
		rf := refuseBodyOnRead(w, r)
		return writeDetail(w, rf.Status, rf.Message)
	}
	if scope := p.key.scope(r.Method); scope != "" {
		if _, rf := g.keys.Check(r.Header.Values(headerAPIKey), scope); rf != nil {
			return writeDetail(w, rf.Status, rf.Message)
		}
	}
	return p.answer(g, w, r)
}

// answerLive answers GET /_sidecar/live: 200 {"status": "ok"}.
func (g *Gate) answerLive(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
}

// answerReady answers GET /_sidecar/ready: 200 when ready, else 503, with
// what it waits for and the readiness notes without their error text.
func (g *Gate) answerReady(w http.ResponseWriter, _ *http.Request) error {
	ready, reasons := g.ready()
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	body := map[string]any{"ready": ready, "waiting_for": reasons}
	if notes := g.notes(false); notes != nil {
		body["notes"] = notes
	}
	return writeJSON(w, status, body)
}

// answerStatus answers GET /_sidecar/status (read key checked): the
// operator view (status).
func (g *Gate) answerStatus(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, g.status())
}

// serveRefresh answers POST /_sidecar/refresh (write key checked): it
// fetches the JWKS document (when jwks_url is set; not rate-limited, a fetch
// in progress is joined) and every agent card (when a registration source is
// on), within 10 s, and answers 200 {"refreshed": [slugs], "errors":
// {slug: error}, "jwks": {"ok": bool, "error": "..."}} ("jwks" only with a
// JWKS), or 404 when there is neither.
func (g *Gate) serveRefresh(w http.ResponseWriter, r *http.Request) error {
	hasJWKS := false
	if g.verifier != nil {
		_, _, _, hasJWKS = g.verifier.JWKSStatus()
	}
	if g.contracts == nil && !hasJWKS {
		return writeDetail(w, http.StatusNotFound, "registration is off and no JWKS is configured")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	out := map[string]any{"refreshed": []string{}, "errors": map[string]string{}}
	if hasJWKS {
		j := map[string]any{"ok": true}
		if _, err := g.verifier.RefreshJWKS(ctx); err != nil {
			j["ok"], j["error"] = false, redact.URLsIn(err.Error())
		}
		out["jwks"] = j
	}
	if g.contracts != nil {
		errs := map[string]string{}
		for _, slug := range g.contracts.Slugs() {
			if err := g.contracts.Refresh(ctx, slug); err != nil {
				errs[slug] = redact.URLsIn(err.Error())
			}
		}
		out["refreshed"], out["errors"] = g.contracts.Slugs(), errs
	}
	return writeJSON(w, http.StatusOK, out)
}

// ready is the readiness signal: keys usable (PEM parsed, or a JWKS with a
// usable key fetched, and not past jwks_max_stale: waiting_for "jwks" or
// "jwks_stale") and, with a registration source, every agent's card read.
func (g *Gate) ready() (bool, []string) {
	var waiting []string
	if g.verifier != nil && !g.verifier.Ready() {
		if g.verifier.KeysStale() {
			waiting = append(waiting, "jwks_stale")
		} else {
			waiting = append(waiting, "jwks")
		}
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

// status is the operator view: no secrets, no tokens, URLs through
// redactURL (also inside error texts).
func (g *Gate) status() map[string]any {
	ready, waiting := g.ready()
	out := map[string]any{"mode": g.modeName(), "server_id": g.serverID, "ready": ready, "waiting_for": waiting}
	if g.verifier != nil {
		if loaded, last, lastErr, ok := g.verifier.JWKSStatus(); ok {
			j := map[string]any{"loaded": loaded, "stale": g.verifier.KeysStale()}
			if !last.IsZero() {
				j["last_good_refresh"] = last.UTC().Format(time.RFC3339)
			}
			if lastErr != nil {
				j["last_error"] = redact.URLsIn(lastErr.Error())
			}
			out["jwks"] = j
		}
	}
	if g.contracts != nil {
		st := g.contracts.Status()
		for slug, s := range st {
			s.LastError = redact.URLsIn(s.LastError)
			st[slug] = s
		}
		out["contracts"] = st
	}
	if g.settings != nil {
		out["settings"] = g.settings // secrets as fingerprints, URLs redacted (config/settings.go)
	}
	if g.intro != nil {
		out["introspection"] = g.introspectionStatus()
	}
	out["body_memory"] = BodyMemory.status()
	if notes := g.notes(true); notes != nil {
		out["notes"] = notes
	}
	return out
}

// notes are the readiness notes (a dependency failing while calls go on):
// /_sidecar/ready, which takes no key, gets them without the last error's
// text (a store's or an endpoint's error may name a user or describe the
// deployment); /_sidecar/status (read key) gets the text too, URLs redacted.
func (g *Gate) notes(lastError bool) []string {
	notes := append(g.introspectionNotes(lastError), g.limitsNotes(lastError)...)
	notes = append(notes, g.referencesNotes(lastError)...)
	return append(notes, g.idemHealth.note("idempotency store", lastError)...)
}
