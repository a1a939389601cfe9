// The request memory's Caddy glue: one events.Memory per server id, shared
// across reloads (what the gate records in it: gate/references.go, rememberForEvents).

package caddymodule

import (
	"github.com/caddyserver/caddy/v2"

	"github.com/supervaize/supervaizer-sidecar/events"
)

// requestMemories shares one events.Memory per server id across reloads.
var requestMemories = caddy.NewUsagePool()

// RequestMemory is the request memory of serverID (gate.Shared), shared
// with every gate holding it.
func (pools) RequestMemory(serverID string) (*events.Memory, func()) {
	v, _, _ := requestMemories.LoadOrNew(serverID, func() (caddy.Destructor, error) {
		return events.NewMemory(), nil
	})
	return v.(*events.Memory), func() { _, _ = requestMemories.Delete(serverID) }
}
