// The route policy: per route class, as one table (routePolicies), the
// methods it serves, whether it is open, the X-API-Key scope, the body rule
// and the handler that runs (the one that reads the workspace token); Serve and
// classifyRoute read it (docs/architecture.md, "Route table", is the same
// table in words).

package gate

import (
	"net/http"
	"slices"
)

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

// bodyBound is the body bound of a request of method under p: 0 for a GET
// or HEAD (no route class takes a body on a read: readTakesNoBody), else
// its rule's (bodyLimit).
func (g *Gate) bodyBound(p *routePolicy, method string) int64 {
	if isRead(method) {
		return 0
	}
	return g.bodyLimit(p.body)
}

// isRead reports whether method is GET or HEAD.
func isRead(method string) bool { return slices.Contains(readMethods, method) }

// bodyOnRead reports whether r is a GET or HEAD declaring a body. On every
// route class this is refused (400, HTTP/1 connection closed:
// refuseBodyOnRead): the SDK's reads take none, and an agent that does not
// read an unexpected GET body would take its bytes for a second request on
// the proxy's connection, one the gate never checked. An undeclared body
// (HTTP/2, HTTP/3) is cut at its first byte by bodyBound's 0.
func bodyOnRead(r *http.Request) bool { return isRead(r.Method) && declaresBody(r) }

// bodyLimit is the body bound of rule b, in bytes.
func (g *Gate) bodyLimit(b bodyRule) int64 {
	switch b {
	case bodyReadA2A:
		return g.maxBodyA2A
	case bodyMaxData:
		return g.maxBodyData
	}
	return g.maxBody
}

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
