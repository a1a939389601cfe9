package caddymodule

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// routeClass is the door a request comes through (docs/architecture.md,
// "Route table"; docs/sdk-wire.md, "Routes").
type routeClass int

const (
	classOther      routeClass = iota // anything else: other_routes policy
	classPublic                       // discovery documents and health: no key
	classController                   // POST /a2a: the JSON-RPC gate
	classEvents                       // GET /a2a/events: read key (+ optional token filter)
	classData                         // DataResource REST: key + workspace token always
	classLegacy                       // /api/supervaizer/...: key (read for GET/HEAD)
)

var classNames = [...]string{"other", "public", "controller", "events", "data", "legacy"}

func (c routeClass) String() string { return classNames[c] }

// route is the classification of one request.
type route struct {
	class routeClass
	// status is non-zero when the request is refused before any other check:
	// 400 (bad path), 405 (wrong method on a known path).
	status int
	reason string
	// DataResource facts.
	agentSlug, resource, operation string
}

// keyScope is the X-API-Key scope the route needs ("" for none).
func (r route) keyScope(method string) string {
	switch r.class {
	case classPublic:
		return ""
	case classEvents:
		return "read"
	case classData, classLegacy, classOther:
		if method == http.MethodGet || method == http.MethodHead {
			return "read"
		}
		return "write"
	}
	return "write"
}

// classifyRoute decides the route class of a request from its method and
// escaped path (r.URL.EscapedPath(), what reverse_proxy sends upstream),
// decoding it the way the agent's router will (full percent-decoding, case
// sensitive, no dot-segment or slash merging).
//
// Refused with 400: a path that does not decode, an encoded slash or
// backslash (%2F, %5C), a NUL, a backslash, a ';', an empty segment ("//"),
// a "." or ".." segment, or a path not starting with "/". A known path with a
// method it does not serve is 405. One trailing slash is ignored except where
// it distinguishes DataResource routes.
func classifyRoute(method, escapedPath string) route {
	bad := func(reason string) route { return route{status: http.StatusBadRequest, reason: reason} }
	lower := strings.ToLower(escapedPath)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") {
		return bad("encoded slash in path")
	}
	path, err := url.PathUnescape(escapedPath)
	if err != nil {
		return bad("path does not decode")
	}
	if !strings.HasPrefix(path, "/") {
		return bad("path must start with /")
	}
	if strings.ContainsAny(path, "\x00\\;") {
		return bad("NUL, backslash or ';' in path")
	}
	if strings.Contains(path, "//") {
		return bad("empty segment in path")
	}
	trimmed := path
	trailingSlash := len(path) > 1 && strings.HasSuffix(path, "/")
	if trailingSlash {
		trimmed = path[:len(path)-1]
	}
	segs := strings.Split(trimmed[1:], "/")
	for _, s := range segs {
		if s == "." || s == ".." {
			return bad("dot segment in path")
		}
		if s == "" && trimmed != "/" {
			return bad("empty segment in path")
		}
	}

	get := method == http.MethodGet || method == http.MethodHead
	only := func(ok bool, r route) route {
		if !ok {
			r.status = http.StatusMethodNotAllowed
			r.reason = "method not allowed"
		}
		return r
	}

	switch {
	case trimmed == "/a2a":
		return only(method == http.MethodPost, route{class: classController})
	case trimmed == "/a2a/events":
		return only(get, route{class: classEvents})
	case isPublicPath(segs):
		return only(get, route{class: classPublic})
	case len(segs) >= 2 && segs[0] == "api" && segs[1] == "supervaizer":
		return route{class: classLegacy}
	case len(segs) >= 5 && segs[0] == "api" && segs[1] == "agents" && segs[3] == "data":
		return classifyData(method, segs, trailingSlash)
	}
	return route{class: classOther}
}

// classifyData maps /api/agents/{slug}/data/{resource}/... to its operation
// (docs/sdk-wire.md, "DataResource routes").
func classifyData(method string, segs []string, trailingSlash bool) route {
	r := route{class: classData, agentSlug: segs[2], resource: segs[4]}
	notAllowed := func() route {
		r.status, r.reason = http.StatusMethodNotAllowed, "method not allowed"
		return r
	}
	switch len(segs) {
	case 5: // .../{resource}/
		switch method {
		case http.MethodGet, http.MethodHead:
			r.operation = "list"
		case http.MethodPost:
			r.operation = "create"
		default:
			return notAllowed()
		}
	case 6: // .../{resource}/{item_id} or .../{resource}/import/
		if segs[5] == "import" && trailingSlash {
			if method != http.MethodPost {
				return notAllowed()
			}
			r.operation = "import"
			return r
		}
		switch method {
		case http.MethodGet, http.MethodHead:
			r.operation = "get"
		case http.MethodPut:
			r.operation = "update"
		case http.MethodDelete:
			r.operation = "delete"
		case http.MethodPost:
			if segs[5] == "import" {
				r.operation = "import"
				return r
			}
			return notAllowed()
		default:
			return notAllowed()
		}
	default:
		return route{class: classOther}
	}
	return r
}

// isPublicPath matches the discovery documents and health:
// /.well-known/agents.json, /.well-known/agents/v{version}/{slug}_agent.json,
// /.well-known/agents/{slug}_agent.json, /.well-known/health.
func isPublicPath(segs []string) bool {
	if len(segs) < 2 || segs[0] != ".well-known" {
		return false
	}
	agentDoc := func(s string) bool { return strings.HasSuffix(s, "_agent.json") && len(s) > len("_agent.json") }
	switch len(segs) {
	case 2:
		return segs[1] == "agents.json" || segs[1] == "health"
	case 3:
		return segs[1] == "agents" && agentDoc(segs[2])
	case 4:
		return segs[1] == "agents" && len(segs[2]) > 1 && segs[2][0] == 'v' && agentDoc(segs[3])
	}
	return false
}

// dataScopes are the scopes a DataResource route needs.
func (r route) dataScopes() []string { return grants.ResourceScopes(r.resource, r.operation) }
