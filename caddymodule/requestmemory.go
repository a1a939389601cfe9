// The request memory's Caddy glue: one events.Memory per server id, shared
// across reloads (what the gate records in it: gate/requestmemory.go).

package caddymodule

import (
	"github.com/caddyserver/caddy/v2"

	"github.com/supervaize/supervaizer-sidecar/events"
)

// requestMemories shares one events.Memory per server id across reloads.
var requestMemories = caddy.NewUsagePool()

// acquireRequestMemory returns the request memory of serverID, shared with
// every gate holding it; pair it with releaseRequestMemory.
func acquireRequestMemory(serverID string) *events.Memory {
	v, _, _ := requestMemories.LoadOrNew(serverID, func() (caddy.Destructor, error) {
		return events.NewMemory(), nil
	})
	return v.(*events.Memory)
}

// releaseRequestMemory gives back one gate's reference.
func releaseRequestMemory(serverID string) { _, _ = requestMemories.Delete(serverID) }
