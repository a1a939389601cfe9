package events

import (
	"fmt"
	"testing"
	"time"
)

// checkMemory asserts m's bookkeeping: every entry in its owner's list,
// the counts, byCount and most consistent, nobody over its share, the
// whole within its size.
func checkMemory(t *testing.T, m *Memory) {
	t.Helper()
	total := 0
	for name, s := range m.workspaces {
		n := 0
		for e := s.first; e != nil; e = e.next {
			if m.entries[e.id] != e || e.owner != s {
				t.Fatalf("entry %s of %s not in the memory", e.id, name)
			}
			n++
		}
		if n != s.n || n == 0 || n > m.share || m.byCount[n][s.slot] != s {
			t.Fatalf("workspace %s: %d entries, counted %d, share %d", name, n, s.n, m.share)
		}
		if n > m.most {
			t.Fatalf("most %d < %d", m.most, n)
		}
		total += n
	}
	if total != len(m.entries) || total != m.total || total > m.size {
		t.Fatalf("%d entries listed, %d in the map, total %d, size %d", total, len(m.entries), m.total, m.size)
	}
	if m.most > 0 && len(m.byCount[m.most]) == 0 {
		t.Fatalf("most %d names nobody", m.most)
	}
}

// TestMemoryFloodKeepsOtherWorkspaces: one workspace making as many calls
// as the whole memory holds (100,000) keeps only its share (its newest
// 12,500) and never evicts another workspace's entries: they still
// resolve to their workspace, and the flooder still cannot claim them.
func TestMemoryFloodKeepsOtherWorkspaces(t *testing.T) {
	m := NewMemory()
	for i := range 1000 {
		m.Remember(fmt.Sprintf("a-%d", i), "wsA")
	}
	if !m.Claim("a-claimed", "wsA") {
		t.Fatal("A's claim of a new request_id")
	}
	for i := range requestMemorySize {
		if !m.Claim(fmt.Sprintf("b-%d", i), "wsB") {
			t.Fatalf("B's claim of its own b-%d refused", i)
		}
	}
	checkMemory(t, m)
	for _, id := range []string{"a-0", "a-999", "a-claimed"} {
		if ws, ok := m.workspace(id); !ok || ws != "wsA" {
			t.Fatalf("after B's flood, %s is %q %v, want wsA", id, ws, ok)
		}
		if m.Claim(id, "wsB") {
			t.Fatalf("after B's flood, B claimed A's %s", id)
		}
	}
	share := requestMemorySize / requestMemoryShares
	if n := m.workspaces["wsB"].n; n != share {
		t.Fatalf("B holds %d entries, want its share %d", n, share)
	}
	if _, ok := m.workspace("b-0"); ok {
		t.Fatal("B's oldest entry outlived its share")
	}
	if ws, ok := m.workspace(fmt.Sprintf("b-%d", requestMemorySize-1)); !ok || ws != "wsB" {
		t.Fatal("B's newest entry is gone")
	}
	if ws, ok := m.workspace(fmt.Sprintf("b-%d", requestMemorySize-share)); !ok || ws != "wsB" {
		t.Fatal("B's oldest entry within its share is gone")
	}
}

// TestMemoryConflictStaysWithOwner: a request_id of A reused by B is
// delivered to nobody, and stays so however much B floods: the entry is
// charged to A, so B's flood cannot make it forgotten and then claim it.
func TestMemoryConflictStaysWithOwner(t *testing.T) {
	m := newMemory(80, 10)
	m.Remember("r", "wsA")
	m.Remember("r", "wsB")
	if _, ok := m.workspace("r"); ok {
		t.Fatal("a request_id seen for two workspaces is delivered")
	}
	for i := range 200 {
		m.Remember(fmt.Sprintf("b-%d", i), "wsB")
	}
	checkMemory(t, m)
	if _, ok := m.workspace("r"); ok || m.Claim("r", "wsB") || m.Claim("r", "wsA") {
		t.Fatal("the conflicted request_id was forgotten or claimed after B's flood")
	}
	if m.workspaces["wsA"].n != 1 {
		t.Fatal("the conflicted entry is not charged to its first workspace")
	}
}

// TestMemoryFullTakesFromLargest: with the memory full (8 workspaces or
// more), a new entry takes the oldest entry of a workspace holding the
// most, never one of a workspace holding less.
func TestMemoryFullTakesFromLargest(t *testing.T) {
	m := newMemory(16, 2)
	m.Remember("small", "wsA")
	for w := range 7 {
		for i := range 2 {
			m.Remember(fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("w%d", w))
		}
	}
	m.Remember("w7-0", "w7")
	checkMemory(t, m)
	if m.total != 16 {
		t.Fatalf("total %d, want the memory full", m.total)
	}
	// Seven newcomers take one entry of each of w0..w6 (then everybody
	// holds one: the memory is shared by 16 workspaces).
	for i := range 7 {
		m.Remember(fmt.Sprintf("new-%d", i), fmt.Sprintf("n%d", i))
		checkMemory(t, m)
		if ws, ok := m.workspace("small"); !ok || ws != "wsA" {
			t.Fatalf("A's one entry taken by new-%d", i)
		}
	}
	for w := range 7 {
		if m.workspaces[fmt.Sprintf("w%d", w)].n != 1 {
			t.Fatalf("w%d still holds two entries", w)
		}
	}
	// A workspace at its share loses its own oldest.
	m.Remember("small-2", "wsA")
	m.Remember("small-3", "wsA")
	checkMemory(t, m)
	if _, ok := m.workspace("small"); ok {
		t.Fatal("A over its share kept its oldest")
	}
	if ws, ok := m.workspace("small-3"); !ok || ws != "wsA" {
		t.Fatal("A's newest entry is gone")
	}
}

// TestMemoryExpiry: an expired entry reads as absent and may be claimed
// again; renewing keeps it its owner's newest.
func TestMemoryExpiry(t *testing.T) {
	m := newMemory(16, 2)
	m.Remember("old", "wsA")
	m.Remember("keep", "wsA")
	m.entries["old"].expires = time.Now().Add(-time.Second)
	if _, ok := m.workspace("old"); ok {
		t.Fatal("an expired entry is delivered")
	}
	if !m.Claim("old", "wsB") {
		t.Fatal("an expired request_id could not be claimed")
	}
	checkMemory(t, m)
	m.Remember("keep2", "wsA")
	if !m.Claim("keep", "wsA") { // renewed: now A's newest
		t.Fatal("A's own claim refused")
	}
	m.Remember("keep3", "wsA") // A at its share: keep2, its oldest now, goes
	checkMemory(t, m)
	if _, ok := m.workspace("keep2"); ok {
		t.Fatal("the renewed entry went before an older one")
	}
	if ws, ok := m.workspace("keep"); !ok || ws != "wsA" {
		t.Fatal("the renewed entry is gone")
	}
}
