// The process-wide memory budget of the /a2a bodies held while the gate
// decides (body_memory, caddymodule's Handler.BodyMemory; docs/errors.md, "Body limits").

package gate

import (
	"sync"
)

// DefaultBodyMemory is the default budget: 32 MiB, two /a2a bodies at the
// 16 MiB default bound, sized for the k8s base's 256 MiB container. A held
// body costs up to about five times its size at peak with idempotency (the
// body, its buffer's growth, the envelope parse's key checks, the
// fingerprint's sorted members, garbage not yet collected; for every shape
// of body deploy/k8s/body_memory_test.go sends): 5 × 32 MiB + 64 MiB stays under
// 90 % of 256 MiB (deploy/k8s/README.md, "Memory";
// deploy/k8s/body_memory_test.go measures it).
const DefaultBodyMemory = 32 << 20

// bodyRetryAfter is the Retry-After, in seconds, of a call refused because
// the budget is spent: about the time a held body takes to be decided and
// forwarded.
const bodyRetryAfter = 1

// bodyBudget counts the bytes of request bodies held at once by every gate
// of the process. Its capacity is the largest body_memory of the gates
// loaded (two handlers of one config, or the old and the new config during
// a reload, share it). A reservation never waits: it fits or is refused.
type bodyBudget struct {
	mu       sync.Mutex
	used     int64
	capacity int64
	gates    map[*Gate]int64 // each loaded gate's body_memory
}

// BodyMemory is the process's budget.
var BodyMemory = &bodyBudget{capacity: DefaultBodyMemory, gates: map[*Gate]int64{}}

// join adds g, with its budget v, to the gates sharing the budget, and
// reports the capacity now in force and whether another loaded gate asked
// for a different one.
func (b *bodyBudget) Join(g *Gate, v int64) (capacity int64, differs bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.gates {
		differs = differs || o != v
	}
	b.gates[g] = v
	b.resize()
	return b.capacity, differs
}

// leave removes g; the capacity becomes the largest of the others'.
func (b *bodyBudget) Leave(g *Gate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.gates[g]; ok {
		delete(b.gates, g)
		b.resize()
	}
}

// resize (under mu) sets the capacity to the largest budget of the gates
// loaded; with none, the previous capacity stays for the requests still
// running.
func (b *bodyBudget) resize() {
	if len(b.gates) == 0 {
		return
	}
	b.capacity = 0
	for _, v := range b.gates {
		b.capacity = max(b.capacity, v)
	}
}

// reserve takes n bytes of the budget if they fit, and reports whether
// they did.
func (b *bodyBudget) reserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.capacity-b.used {
		return false
	}
	b.used += n
	return true
}

// release gives back n reserved bytes.
func (b *bodyBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// inUse is the bytes reserved now (for tests and the status page).
func (b *bodyBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
