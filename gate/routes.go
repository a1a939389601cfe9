// Route classification: the route class of a request from its method and
// escaped path (docs/architecture.md, "Route table").

package gate

import (
	"net/http"
	"net/url"
	"slices"
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
	// The sidecar's own endpoints (ops.go), answered before any other
	// class is considered: not decisions, never forwarded.
	classLive    // /_sidecar/live: liveness
	classReady   // /_sidecar/ready: readiness
	classStatus  // /_sidecar/status: operator status (read key)
	classRefresh // /_sidecar/refresh: JWKS and agent cards read now (write key)
)

var classNames = [...]string{"other", "public", "controller", "events", "data", "legacy", "live", "ready", "status", "refresh"}

func (c routeClass) String() string { return classNames[c] }

// route is the classification of one request.
type route struct {
	class routeClass
	// status is non-zero when the request is refused before any other check:
	// 400 (bad path), 405 (wrong method on a known path).
	status int
	reason string
	// DataResource facts; item is the {item_id} of a get, update or
	// delete ("" otherwise).
	agentSlug, resource, operation, item string
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
	var segBuf [8]string // the Supervaizer paths have at most 6 segments: no allocation
	segs := appendSplit(segBuf[:0], trimmed[1:], '/')
	for _, s := range segs {
		if s == "." || s == ".." {
			return bad("dot segment in path")
		}
		if s == "" && trimmed != "/" {
			return bad("empty segment in path")
		}
	}

	if len(segs) > 0 && segs[0] == "_sidecar" {
		// The sidecar's namespace: its endpoints (ops.go) match the exact
		// escaped path in step 2; any other path here (a trailing slash, an
		// encoded letter) is neither theirs nor the agent's.
		return route{status: http.StatusNotFound, reason: "sidecar_path"}
	}
	var class routeClass
	switch {
	case trimmed == "/a2a":
		class = classController
	case trimmed == "/a2a/events":
		class = classEvents
	case isPublicPath(segs):
		class = classPublic
	case len(segs) >= 2 && segs[0] == "api" && segs[1] == "supervaizer":
		class = classLegacy
	case len(segs) >= 5 && segs[0] == "api" && segs[1] == "agents" && segs[3] == "data":
		return classifyData(method, segs, trailingSlash)
	}
	r := route{class: class}
	if !r.policy().serves(method) {
		return r.notAllowed()
	}
	return r
}

// notAllowed is r refused with 405: a known path, a method it does not
// serve (routePolicies, dataOperations).
func (r route) notAllowed() route {
	r.status, r.reason = http.StatusMethodNotAllowed, "method not allowed"
	return r
}

// classifyData maps /api/agents/{slug}/data/{resource}/... to its operation
// (dataOperations); a path with more segments is classOther.
func classifyData(method string, segs []string, trailingSlash bool) route {
	var shape dataShape
	switch {
	case len(segs) == 5:
		shape = dataCollection
	case len(segs) == 6 && segs[5] == "import" && trailingSlash:
		shape = dataImport
	case len(segs) == 6 && segs[5] == "import":
		shape = dataImportOrItem
	case len(segs) == 6:
		shape = dataItem
	default:
		return route{class: classOther}
	}
	r := route{class: classData, agentSlug: segs[2], resource: segs[4]}
	op, ok := dataOperations[shape][method]
	if !ok {
		return r.notAllowed()
	}
	r.operation = op
	if op == "get" || op == "update" || op == "delete" {
		r.item = segs[5]
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

// appendSplit appends to dst the substrings of s between each sep, as
// strings.Split(s, string(sep)) returns them ("" gives one empty segment).
func appendSplit(dst []string, s string, sep byte) []string {
	for {
		i := strings.IndexByte(s, sep)
		if i < 0 {
			return append(dst, s)
		}
		dst = append(dst, s[:i])
		s = s[i+1:]
	}
}

// The route policy: per route class, as one table (routePolicies), the
// methods it serves, whether it is open, the X-API-Key scope, the body rule
// and the handler that runs (the one that reads the workspace token); Serve and
// classifyRoute read it (docs/architecture.md, "Route table", is the same
// table in words).

// routePolicy is what the gate does with one route class.
type routePolicy struct {
	// methods served; any other is 405. nil: every method, or for data
	// routes the methods of each operation (dataOperations).
	methods []string
	door    doorRule
	key     keyRule
	body    bodyRule
	// serve runs after the door and the key let the request in; nil: the
	// key was all there was to check, the request passes to the agent.
	// Only serve reads the workspace token (X-Supervaize-Workspace-
	// Authorization): serveController per JSON-RPC call and auth mode
	// (decideCall; the bootstrap set and local mode excepted), serveEvents
	// to filter the stream when present (required with
	// events_require_workspace_token), serveData always, local mode
	// included (decideData).
	serve func(g *Gate, w http.ResponseWriter, r *http.Request, next Next, rt route, a *audit) error
	// answer, on the sidecar's own endpoints (ops.go), is the sidecar's
	// answer once the method and the key passed: not a decision, never
	// forwarded.
	answer func(g *Gate, w http.ResponseWriter, r *http.Request) error
}

// routePolicies is the route table, indexed by routeClass.
var routePolicies = [...]routePolicy{
	classOther:      {door: doorOtherRoutes, key: keyReadIfGet, body: bodyMax},
	classPublic:     {methods: readMethods, door: doorOpen, key: keyNone, body: bodyMax},
	classController: {methods: []string{http.MethodPost}, door: doorKey, key: keyWrite, body: bodyReadA2A, serve: (*Gate).serveController},
	classEvents:     {methods: readMethods, door: doorKey, key: keyRead, body: bodyMax, serve: (*Gate).serveEvents},
	classData:       {door: doorKey, key: keyReadIfGet, body: bodyMaxData, serve: (*Gate).serveData},
	classLegacy:     {door: doorLegacyRoutes, key: keyReadIfGet, body: bodyMax},
	classLive:       {methods: readMethods, door: doorOpen, key: keyNone, body: bodyNone, answer: (*Gate).answerLive},
	classReady:      {methods: readMethods, door: doorOpen, key: keyNone, body: bodyNone, answer: (*Gate).answerReady},
	classStatus:     {methods: readMethods, door: doorKey, key: keyRead, body: bodyNone, answer: (*Gate).answerStatus},
	classRefresh:    {methods: []string{http.MethodPost}, door: doorKey, key: keyWrite, body: bodyNone, answer: (*Gate).serveRefresh},
}

// readMethods are the methods of the read-only routes, and the ones a read
// key may use on the others (keyReadIfGet).
var readMethods = []string{http.MethodGet, http.MethodHead}

// policy is the route table's row for r's class.
func (r route) policy() *routePolicy { return &routePolicies[r.class] }

// serves reports whether the class serves method (case sensitive, as the
// agent's router).
func (p *routePolicy) serves(method string) bool {
	return p.methods == nil || slices.Contains(p.methods, method)
}

// doorRule is whether a route class lets a request in before the key.
type doorRule int

const (
	doorKey          doorRule = iota // the key decides
	doorOpen                         // in without a key
	doorOtherRoutes                  // other_routes: 404 (deny), the key (api_key) or in without a key (public)
	doorLegacyRoutes                 // legacy_routes: the key when allowed, else 404
)

// admission is what a door does under this gate's settings.
type admission int

const (
	admitKey    admission = iota // the key decides
	admitOpen                    // in without a key
	admitClosed                  // 404, the agent is never called
)

// admit resolves door d under this gate's settings.
func (g *Gate) admit(d doorRule) admission {
	switch d {
	case doorOpen:
		return admitOpen
	case doorOtherRoutes:
		switch g.otherRoutes {
		case OtherDeny:
			return admitClosed
		case OtherPublic:
			return admitOpen
		}
	case doorLegacyRoutes:
		if !g.legacyAllowed {
			return admitClosed
		}
	}
	return admitKey
}

// keyRule is the X-API-Key scope a route class needs.
type keyRule int

const (
	keyNone      keyRule = iota // no key
	keyRead                     // read, whatever the method
	keyWrite                    // write
	keyReadIfGet                // read for GET and HEAD, write otherwise
)

// scope is the scope Keys.Check checks for method ("" for none).
func (k keyRule) scope(method string) string {
	switch k {
	case keyNone:
		return ""
	case keyRead:
		return "read"
	case keyReadIfGet:
		if slices.Contains(readMethods, method) {
			return "read"
		}
	}
	return "write"
}

// bodyRule is how a class bounds its request body.
type bodyRule int

const (
	bodyMax     bodyRule = iota // streamed, bounded by max_body (limitBody)
	bodyMaxData                 // streamed, bounded by max_body_data
	bodyReadA2A                 // read whole by the handler, bounded by max_body_a2a (readBody)
	bodyNone                    // not read: the sidecar answers itself (ops.go)
)

// streamed reports whether the body goes to the agent as it arrives,
// bounded by Serve; otherwise the class's handler reads it whole, or the
// sidecar answers without it.
func (b bodyRule) streamed() bool { return b == bodyMax || b == bodyMaxData }

// dataShape is the shape of a DataResource path after
// /api/agents/{slug}/data/{resource}.
type dataShape int

const (
	dataCollection   dataShape = iota // .../{resource}/
	dataItem                          // .../{resource}/{item_id}
	dataImport                        // .../{resource}/import/
	dataImportOrItem                  // .../{resource}/import: an item named import, or the import
)

// dataOperations is the DataResource route table: the operation of each
// method on each path shape (docs/sdk-wire.md, "DataResource routes"); a
// method not listed is 405.
var dataOperations = [...]map[string]string{
	dataCollection:   {http.MethodGet: "list", http.MethodHead: "list", http.MethodPost: "create"},
	dataItem:         {http.MethodGet: "get", http.MethodHead: "get", http.MethodPut: "update", http.MethodDelete: "delete"},
	dataImport:       {http.MethodPost: "import"},
	dataImportOrItem: {http.MethodGet: "get", http.MethodHead: "get", http.MethodPut: "update", http.MethodDelete: "delete", http.MethodPost: "import"},
}
