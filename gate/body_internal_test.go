package gate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/config"
)

// TestBodyMemoryFitsOneMaxBody: a body of max_body_a2a bytes fits a budget
// of max_body_a2a (the smallest the validation accepts), declared or not,
// and the budget is whole again once it is released; a second body does
// not fit while the first is held.
func TestBodyMemoryFitsOneMaxBody(t *testing.T) {
	const limit = 64 << 10
	g := &Gate{maxBodyA2A: limit, bodyTimeout: time.Minute}
	saved := BodyMemory
	BodyMemory = newBodyBudget(limit, limit)
	t.Cleanup(func() { BodyMemory = saved })
	for _, declared := range []int64{limit, -1} {
		data := bytes.Repeat([]byte("a"), limit)
		r := httptest.NewRequest(http.MethodPost, "/a2a", bytes.NewReader(data))
		r.ContentLength = declared
		got, held, status, _ := g.readBody(httptest.NewRecorder(), r, limit, chargeTo{})
		if status != 0 || !bytes.Equal(got, data) {
			t.Fatalf("declared %d: status %d, %d bytes", declared, status, len(got))
		}
		if held.n > limit || BodyMemory.inUse() != held.n {
			t.Fatalf("declared %d: held %d, in use %d", declared, held.n, BodyMemory.inUse())
		}
		r2 := httptest.NewRequest(http.MethodPost, "/a2a", bytes.NewReader([]byte("{}")))
		if _, _, status, _ := g.readBody(httptest.NewRecorder(), r2, limit, chargeTo{}); status != http.StatusServiceUnavailable {
			t.Fatalf("declared %d: a second body while the first is held: status %d, want 503", declared, status)
		}
		held.release()
		if BodyMemory.inUse() != 0 {
			t.Fatalf("declared %d: %d bytes still in use", declared, BodyMemory.inUse())
		}
	}
}

// TestBodyMemoryChargedAsBytesArrive: a body that declares max_body_a2a
// bytes and sends one holds at most bodyPresize of the budget (not the
// declared length), so a few such connections cannot refuse every other
// call; a small call still fits beside it, and the budget is whole again
// once the held body fails.
func TestBodyMemoryChargedAsBytesArrive(t *testing.T) {
	const limit = 16 << 20
	g := &Gate{maxBodyA2A: limit, bodyTimeout: time.Minute}
	saved := BodyMemory
	BodyMemory = newBodyBudget(limit, limit)
	t.Cleanup(func() { BodyMemory = saved })
	pr, pw := io.Pipe()
	r := httptest.NewRequest(http.MethodPost, "/a2a", pr)
	r.ContentLength = limit - 1
	done := make(chan int)
	go func() {
		_, held, status, _ := g.readBody(httptest.NewRecorder(), r, limit, chargeTo{})
		held.release()
		done <- status
	}()
	if _, err := pw.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	// The one byte was read (the pipe's Write returned): the reservation
	// is what the buffer holding it costs.
	if used := BodyMemory.inUse(); used == 0 || used > bodyPresize {
		t.Fatalf("one byte of a declared %d held %d bytes of the budget, want 1..%d", limit-1, used, bodyPresize)
	}
	small := httptest.NewRequest(http.MethodPost, "/a2a", bytes.NewReader([]byte("{}")))
	body, held, status, _ := g.readBody(httptest.NewRecorder(), small, limit, chargeTo{})
	if status != 0 || string(body) != "{}" {
		t.Fatalf("a small call beside the held one: status %d", status)
	}
	held.release()
	pw.CloseWithError(errors.New("client gone"))
	if status := <-done; status != http.StatusBadRequest {
		t.Fatalf("the held body: status %d, want 400", status)
	}
	if used := BodyMemory.inUse(); used != 0 {
		t.Fatalf("%d bytes still in use", used)
	}
}

// TestBodyMemoryWorkspaceShare: the share rule of body_memory (bodyBudget;
// docs/errors.md, "Body limits"). At the defaults (32 MiB, bodies of up to
// 16 MiB) one workspace may still hold a body of max_body_a2a; seven
// workspaces taking all they can leave an eighth its whole share, and the
// one refused beyond its share is told so (CodeBodyShareFull), while a
// refusal within a share is the full budget's. Over several shapes of
// budget, the rule's two promises hold: share + pool ≥ the largest body,
// and seven owners at most leave a share.
func TestBodyMemoryWorkspaceShare(t *testing.T) {
	const mib = 1 << 20
	b := newBodyBudget(config.DefaultBodyMemory, config.DefaultMaxBodyA2A)
	if b.share < 2*mib || b.share > config.DefaultBodyMemory/shareGroup {
		t.Fatalf("default share %d", b.share)
	}
	// One owner alone: a maximal body fits, a byte more does not, and the
	// refusal is its share's.
	if ok, _ := b.reserve(chargeTo{id: "ws_a"}, config.DefaultMaxBodyA2A); !ok {
		t.Fatal("one maximal body of one workspace does not fit the idle budget")
	}
	// What the rounding of the share leaves beyond it: share + pool ≥ max_body_a2a.
	extra := b.share + (b.capacity - shareGroup*b.share) - config.DefaultMaxBodyA2A
	if ok, _ := b.reserve(chargeTo{id: "ws_a"}, extra); !ok {
		t.Fatalf("the last %d bytes of a workspace's share and pool", extra)
	}
	if ok, over := b.reserve(chargeTo{id: "ws_a"}, 1); ok || !over {
		t.Fatalf("a byte beyond a workspace's share and the pool: ok %v overShare %v", ok, over)
	}
	// Others still have their shares, and more within the rest.
	for _, ws := range []string{"ws_b", "ws_c", "ws_d", "ws_e", "ws_f", "ws_g"} {
		if ok, _ := b.reserve(chargeTo{id: ws}, b.share); !ok {
			t.Fatalf("%s's share beside a maximal body: refused", ws)
		}
	}
	// Seven owners hold all they may: the eighth's share still fits.
	if ok, _ := b.reserve(chargeTo{id: "ws_h"}, b.share); !ok {
		t.Fatalf("the eighth workspace's share: refused (used %d of %d)", b.inUse(), b.capacity)
	}
	// A ninth owner is beyond the rule: refused as the full budget.
	if ok, over := b.reserve(chargeTo{id: "ws_i"}, b.share); ok || over {
		t.Fatalf("a ninth workspace with eight holding: ok %v overShare %v", ok, over)
	}
	b.release(chargeTo{id: "ws_a"}, config.DefaultMaxBodyA2A+extra)
	for _, ws := range []string{"ws_b", "ws_c", "ws_d", "ws_e", "ws_f", "ws_g", "ws_h"} {
		b.release(chargeTo{id: ws}, b.share)
	}
	if b.inUse() != 0 || b.over != 0 || len(b.owners) != 0 {
		t.Fatalf("after every release: used %d, over %d, owners %v", b.inUse(), b.over, b.owners)
	}

	for _, c := range []struct{ capacity, maxBody int64 }{
		{32 * mib, 16 * mib}, {16 * mib, 16 * mib}, {64 * mib, 16 * mib}, {256 * mib, 16 * mib},
		{128 * mib, 1 * mib}, {17 * mib, 16 * mib}, {1 << 30, 1 << 30}, {64 << 30, 1 << 30},
	} {
		b := newBodyBudget(c.capacity, c.maxBody)
		pool := c.capacity - shareGroup*b.share
		if pool < 0 || b.share+pool < c.maxBody {
			t.Fatalf("%d/%d: share %d, pool %d: a maximal body cannot fit", c.capacity, c.maxBody, b.share, pool)
		}
		// Seven owners, each taking chunks until refused, the first
		// with a maximal body.
		ok, _ := b.reserve(chargeTo{id: "o0"}, c.maxBody)
		if !ok {
			t.Fatalf("%d/%d: a maximal body on an idle budget", c.capacity, c.maxBody)
		}
		chunk := max(c.capacity/64, 1)
		for i := range shareGroup - 1 {
			for {
				if ok, _ := b.reserve(chargeTo{id: fmt.Sprint("o", i)}, chunk); !ok {
					break
				}
			}
		}
		// The eighth: its whole share, in one reservation.
		if ok, _ := b.reserve(chargeTo{id: "o7"}, b.share); !ok && b.share > 0 {
			t.Fatalf("%d/%d: seven owners left less than a share (%d) to an eighth: used %d", c.capacity, c.maxBody, b.share, b.inUse())
		}
	}
}

// TestBodyMemoryShareFollowsGates: the share follows the gates loaded (the
// largest body_memory and the largest max_body_a2a), and what owners hold
// beyond it is counted again when it changes.
func TestBodyMemoryShareFollowsGates(t *testing.T) {
	const mib = 1 << 20
	b := newBodyBudget(config.DefaultBodyMemory, config.DefaultMaxBodyA2A)
	g1 := &Gate{maxBodyA2A: 1 * mib}
	b.Join(g1, 64*mib)
	if want := int64(64 * mib / shareGroup); b.share != want {
		t.Fatalf("share %d, want %d", b.share, want)
	}
	// body_memory ≥ 8 × max_body_a2a: no pool, a workspace holds its
	// share at most.
	if ok, _ := b.reserve(chargeTo{id: "ws_a"}, 8*mib); !ok {
		t.Fatal("8 MiB of a 64 MiB budget")
	}
	if ok, over := b.reserve(chargeTo{id: "ws_a"}, 1); ok || !over {
		t.Fatalf("a byte beyond the share with no pool: ok %v overShare %v", ok, over)
	}
	g2 := &Gate{maxBodyA2A: 32 * mib}
	b.Join(g2, 64*mib)
	if want := int64(32 * mib / 7); b.share != want || b.over != 8*mib-want {
		t.Fatalf("share %d (want %d), over %d", b.share, want, b.over)
	}
	b.Leave(g2)
	b.release(chargeTo{id: "ws_a"}, 8*mib)
	if b.over != 0 || b.inUse() != 0 || b.share != 64*mib/shareGroup {
		t.Fatalf("after leave and release: share %d, over %d, used %d", b.share, b.over, b.inUse())
	}
}

// TestBodyMemoryUnshared: local mode's bodies (no workspace verified) have
// no share: they fill the budget first come first served, as a whole (two
// maximal bodies at the defaults), and a full budget refuses them as such.
func TestBodyMemoryUnshared(t *testing.T) {
	b := newBodyBudget(config.DefaultBodyMemory, config.DefaultMaxBodyA2A)
	local := chargeTo{unshared: true}
	for range 2 {
		if ok, _ := b.reserve(local, config.DefaultMaxBodyA2A); !ok {
			t.Fatalf("a maximal local body with %d in use: refused", b.inUse())
		}
	}
	if ok, over := b.reserve(local, 1); ok || over {
		t.Fatalf("a byte beyond the budget: ok %v overShare %v", ok, over)
	}
	b.release(local, 2*config.DefaultMaxBodyA2A)
	if b.inUse() != 0 || len(b.owners) != 0 || b.over != 0 {
		t.Fatalf("after release: %v", b.status())
	}
}
