// Package events is the sidecar's handling of the agent's Server-Sent
// Events stream (GET /a2a/events): cutting bytes into whole events and
// reading who may see each (sse.go), the per-workspace filter over a
// proxied stream (filter.go), the fan-out hub sharing one upstream stream
// among many clients (hub.go, hubconn.go), and the request memory that ties
// an effect's request_id to the workspace whose call was allowed
// (memory.go). It imports nothing of Caddy: caddymodule decides who may
// open a stream and hands it here.
package events
