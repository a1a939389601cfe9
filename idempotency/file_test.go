package idempotency

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func tempDB(t testing.TB) string { return filepath.Join(t.TempDir(), "sub", "idempotency.db") }

// reopen closes st (as a stopping process does) and opens its file again.
func reopen(t testing.TB, st *FileStore, opts FileOptions) *FileStore {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return newFile(t, opts)
}

func testRecord(fp string) Record {
	return Record{Fingerprint: fp, Status: 200, Header: http.Header{"Content-Type": {"application/json"}, "X-Agent": {"a", "b"}},
		Result: json.RawMessage(`{"status":"ok","by":"` + fp + `"}`)}
}

func mustClaim(t testing.TB, st Store, id string, ttl time.Duration, want ClaimState) ClaimResult {
	t.Helper()
	c, err := st.Claim(context.Background(), id, ttl)
	if err != nil || c.State != want {
		t.Fatalf("claim %s: %v %v, want %v", id, c.State, err, want)
	}
	return c
}

// TestFileRestartKeepsInFlightMarks: a mark taken before a restart still
// reads in flight after it, until its lock TTL, then the key is claimable.
func TestFileRestartKeepsInFlightMarks(t *testing.T) {
	opts := FileOptions{Path: tempDB(t)}
	st := newFile(t, opts)
	long := mustClaim(t, st, "long", time.Hour, StateClaimed)
	const short = 400 * time.Millisecond
	shortAt := time.Now()
	mustClaim(t, st, "short", short, StateClaimed)

	st = reopen(t, st, opts)
	if recs, marks := st.Len(); recs != 0 || marks != 2 {
		t.Fatalf("after reopen: %d records, %d marks", recs, marks)
	}
	mustClaim(t, st, "long", time.Hour, StateInFlight)
	// The mark's token survived too: fencing still holds.
	if err := st.Release(context.Background(), "long", "not-the-token"); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("release with a wrong token: %v", err)
	}
	eventually(t, "the short mark to expire after the restart", func() bool {
		c, err := st.Claim(context.Background(), "short", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if c.State == StateClaimed && time.Since(shortAt) < short {
			t.Fatalf("claimed %s after the first claim, before its lock TTL %s", time.Since(shortAt), short)
		}
		return c.State == StateClaimed
	})
	if err := st.Release(context.Background(), "long", long.Token); err != nil {
		t.Fatalf("the holder's token after the restart: %v", err)
	}
	mustClaim(t, st, "long", time.Hour, StateClaimed)
}

// TestFileRestartKeepsRecords: a record answers after a restart, unchanged,
// and the counts are recomputed from the file.
func TestFileRestartKeepsRecords(t *testing.T) {
	opts := FileOptions{Path: tempDB(t)}
	st := newFile(t, opts)
	ctx := context.Background()
	c := mustClaim(t, st, "id", time.Hour, StateClaimed)
	want := testRecord("fp1")
	if err := st.Record(ctx, "id", c.Token, want, time.Hour); err != nil {
		t.Fatal(err)
	}
	bytesBefore := st.Bytes()

	st = reopen(t, st, opts)
	got := mustClaim(t, st, "id", time.Hour, StateRecorded)
	if !reflect.DeepEqual(*got.Record, want) {
		t.Fatalf("record after restart:\n%+v\nwant\n%+v", *got.Record, want)
	}
	if recs, marks := st.Len(); recs != 1 || marks != 0 || st.Bytes() != bytesBefore {
		t.Fatalf("counts after reopen: %d records, %d marks, %d bytes (want 1, 0, %d)", recs, marks, st.Bytes(), bytesBefore)
	}
	// Byte for byte, even what encoding/json would compact or escape.
	c = mustClaim(t, st, "raw", time.Hour, StateClaimed)
	raw := json.RawMessage("{\"a\": \"<b>&\u2028\"}")
	if err := st.Record(ctx, "raw", c.Token, Record{Fingerprint: "fp", Status: 200, Result: raw}, time.Hour); err != nil {
		t.Fatal(err)
	}
	st = reopen(t, st, opts)
	if got := mustClaim(t, st, "raw", time.Hour, StateRecorded); !bytes.Equal(got.Record.Result, raw) {
		t.Fatalf("result after restart: %s, want %s", got.Record.Result, raw)
	}
	// The copy is the caller's.
	got.Record.Header.Set("X-Agent", "changed")
	if again := mustClaim(t, st, "id", time.Hour, StateRecorded); again.Record.Header.Get("X-Agent") != "a" {
		t.Fatal("Claim returned a shared record")
	}
}

// TestFileRecordTTLAfterRestart: a record expires at its TTL across a
// restart; an expired one is dropped when the file is opened.
func TestFileRecordTTLAfterRestart(t *testing.T) {
	opts := FileOptions{Path: tempDB(t)}
	st := newFile(t, opts)
	ctx := context.Background()
	record := func(id string, ttl time.Duration) time.Time {
		c := mustClaim(t, st, id, time.Hour, StateClaimed)
		at := time.Now() // a record's TTL runs from the start of Record
		if err := st.Record(ctx, id, c.Token, testRecord(id), ttl); err != nil {
			t.Fatal(err)
		}
		return at
	}
	const ttl = 300 * time.Millisecond
	recordedAt := record("a", ttl)
	st = reopen(t, st, opts)
	eventually(t, "record a to expire after the restart", func() bool {
		c, err := st.Claim(ctx, "a", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if c.State == StateClaimed && time.Since(recordedAt) < ttl {
			t.Fatalf("record gone %s after it was written, before its TTL", time.Since(recordedAt))
		}
		return c.State == StateClaimed
	})
	// b expires while no process has the file open; the next open drops it
	// (a's new mark stays).
	bAt := record("b", 50*time.Millisecond)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's TTL to pass", func() bool { return time.Since(bAt) > 100*time.Millisecond })
	st = newFile(t, opts)
	if recs, marks := st.Len(); recs != 0 || marks != 1 || st.Bytes() != 0 {
		t.Fatalf("after reopen: %d records, %d marks, %d bytes (want 0, 1, 0)", recs, marks, st.Bytes())
	}
	mustClaim(t, st, "b", time.Hour, StateClaimed)
}

// TestFileGuardReplaysAfterRestart: the Guard over a reopened store answers
// from the record; a key in flight at the restart is not forwarded again
// before its lock TTL.
func TestFileGuardReplaysAfterRestart(t *testing.T) {
	f := loadFixture(t)
	opts := FileOptions{Path: tempDB(t)}
	st := newFile(t, opts)
	a := newAgent(f.Result)
	req := f.request(t, `1`)
	first := mustDo(t, New(st, Options{}), req, a.forward(req))
	// Another key: its holder "crashes" mid-forward (claimed, never settled).
	crashed := withKey(f.request(t, `1`), "crashed")
	mustClaim(t, st, crashed.Key.ID(), DefaultLockTTL, StateClaimed)

	st = reopen(t, st, opts)
	g := New(st, Options{WaitTimeout: 100 * time.Millisecond})
	retry := f.request(t, `"retry"`)
	rep := mustDo(t, g, retry, a.forward(retry))
	if !rep.Replayed || !bytes.Equal(decode(t, rep.Body).Result, decode(t, first.Body).Result) {
		t.Fatalf("after restart: replayed=%v body %s", rep.Replayed, rep.Body)
	}
	if _, err := g.Do(context.Background(), crashed, a.forward(crashed)); codeOf(err) != CodeInProgress {
		t.Fatalf("key in flight across the restart: %v", err)
	}
	if a.count() != 1 {
		t.Fatalf("forwards = %d, want 1", a.count())
	}
}

// TestFileSecondOpenFails: a second open of a file in use fails within
// OpenTimeout with an error that names the path and says why.
func TestFileSecondOpenFails(t *testing.T) {
	opts := FileOptions{Path: tempDB(t), OpenTimeout: 200 * time.Millisecond}
	st := newFile(t, opts)
	start := time.Now()
	_, err := NewFileStore(opts)
	took := time.Since(start)
	if err == nil || !errors.Is(err, bolt.ErrTimeout) || !strings.Contains(err.Error(), opts.Path) ||
		!strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second open: %v", err)
	}
	if took > opts.OpenTimeout+5*time.Second {
		t.Fatalf("second open took %s (OpenTimeout %s)", took, opts.OpenTimeout)
	}
	mustClaim(t, st, "id", time.Hour, StateClaimed) // the first is unaffected
	reopen(t, st, opts)
}

// TestFileRefusesForeignFiles: a file that is not this store's is refused
// with a clear error and left unchanged.
func TestFileRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	content := bytes.Repeat([]byte("not a database\n"), 1000)
	if err := os.WriteFile(text, content, 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	writeBolt(t, other, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("users"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	})
	future := filepath.Join(dir, "future.db")
	writeBolt(t, future, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		return b.Put(keyVersion, []byte("2"))
	})
	for name, c := range map[string]struct{ path, want string }{
		"text file":      {text, "not a bbolt database"},
		"other layout":   {other, "another layout"},
		"future version": {future, `layout version "2"`},
		"dir is a file":  {filepath.Join(text, "x.db"), "create its directory"},
		"empty path":     {"", "empty path"},
	} {
		before, _ := os.ReadFile(c.path)
		_, err := NewFileStore(FileOptions{Path: c.path})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %v (want %q and the path)", name, err, c.want)
		}
		if after, _ := os.ReadFile(c.path); !bytes.Equal(before, after) {
			t.Errorf("%s: the file was modified", name)
		}
	}
}

func writeBolt(t *testing.T, path string, f func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(f); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFileEntryBoundsNeverEvictLiveEntries: full of live records and marks,
// the store refuses new keys (also after a restart, the counts being
// recomputed) and evicts nothing; expired entries make room.
func TestFileEntryBoundsNeverEvictLiveEntries(t *testing.T) {
	ctx := context.Background()
	opts := FileOptions{Path: tempDB(t), MaxEntries: 3, MaxEntriesPerGroup: 10}
	st := newFile(t, opts)
	for _, id := range []string{"r1", "r2"} {
		c := mustClaim(t, st, id, time.Hour, StateClaimed)
		if err := st.Record(ctx, id, c.Token, testRecord(id), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	m := mustClaim(t, st, "m1", time.Hour, StateClaimed)
	for round := 0; round < 2; round++ {
		if _, err := st.Claim(ctx, "new", time.Hour); !errors.Is(err, ErrStoreFull) {
			t.Fatalf("round %d: claim on a full store: %v", round, err)
		}
		mustClaim(t, st, "r1", time.Hour, StateRecorded)
		mustClaim(t, st, "r2", time.Hour, StateRecorded)
		mustClaim(t, st, "m1", time.Hour, StateInFlight)
		st = reopen(t, st, opts)
	}
	if err := st.Release(ctx, "m1", m.Token); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, st, "new", 50*time.Millisecond, StateClaimed)
	eventually(t, "the expired mark to make room", func() bool {
		c, err := st.Claim(ctx, "newer", time.Hour)
		return err == nil && c.State == StateClaimed
	})
	if recs, marks := st.Len(); recs != 2 || marks != 1 {
		t.Fatalf("%d records, %d marks (want 2, 1)", recs, marks)
	}
}

// TestFilePerWorkspaceBound: one workspace cannot take more than its share,
// also after a restart; another's confirms keep working; nothing is evicted.
func TestFilePerWorkspaceBound(t *testing.T) {
	f := loadFixture(t)
	opts := FileOptions{Path: tempDB(t), MaxEntries: 16} // 2 per workspace by default (16/8)
	st := newFile(t, opts)
	a := newAgent(f.Result)
	g := New(st, Options{})
	inWorkspace := func(ws, key string) Request {
		req := withKey(f.request(t, `1`), key)
		req.Key.WorkspaceID = ws
		return req
	}
	for _, k := range []string{"a1", "a2"} {
		req := inWorkspace("wsA", k)
		mustDo(t, g, req, a.forward(req))
	}
	// The share is counted from the file after a restart.
	st = reopen(t, st, opts)
	g = New(st, Options{})
	reqA3 := inWorkspace("wsA", "a3")
	if _, err := g.Do(context.Background(), reqA3, a.forward(reqA3)); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("a third key of wsA: %v", err)
	}
	for _, k := range []string{"b1", "b2"} {
		req := inWorkspace("wsB", k)
		if rep := mustDo(t, g, req, a.forward(req)); rep.Replayed {
			t.Fatalf("wsB %s replayed", k)
		}
	}
	for _, k := range []string{"a1", "a2", "b1", "b2"} {
		req := inWorkspace("ws"+strings.ToUpper(k[:1]), k)
		if !mustDo(t, g, req, a.forward(req)).Replayed {
			t.Fatalf("%s's record lost", k)
		}
	}
	if a.count() != 4 {
		t.Fatalf("forwards = %d, want 4", a.count())
	}
}

// TestFileByteBound mirrors TestMemoryByteBound: past MaxBytes new keys are
// refused, the record of a forwarded call is kept even past the bound, and a
// record larger than the bound alone is refused with the mark kept.
func TestFileByteBound(t *testing.T) {
	ctx := context.Background()
	mk := func(n int) Record {
		return Record{Fingerprint: "fp", Status: 200, Result: json.RawMessage(`{"p":"` + strings.Repeat("x", n) + `"}`)}
	}
	one := mk(1000)
	size := one.size() + int64(len("id-0"))
	opts := FileOptions{Path: tempDB(t), MaxBytes: 3*size + size/2, MaxBytesPerGroup: 4 * size}
	st := newFile(t, opts)
	for i := 0; i < 4; i++ { // the 4th claim is allowed (3 sizes < bound); its record overshoots
		id := "id-" + itoa(i)
		c := mustClaim(t, st, id, time.Hour, StateClaimed)
		if err := st.Record(ctx, id, c.Token, one, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	st = reopen(t, st, opts)
	if recs, _ := st.Len(); recs != 4 || st.Bytes() != 4*size {
		t.Fatalf("records = %d, bytes = %d, want 4, %d (none evicted)", recs, st.Bytes(), 4*size)
	}
	if _, err := st.Claim(ctx, "id-4", time.Hour); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("claim over the byte bound: %v", err)
	}
	for _, id := range []string{"id-0", "id-3"} {
		mustClaim(t, st, id, time.Hour, StateRecorded)
	}

	st = newFile(t, FileOptions{Path: tempDB(t), MaxBytes: 3*size + size/2, MaxBytesPerGroup: 4 * size})
	c := mustClaim(t, st, "huge", time.Hour, StateClaimed)
	if err := st.Record(ctx, "huge", c.Token, mk(int(4*size)), time.Hour); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("huge record: %v", err)
	}
	mustClaim(t, st, "huge", time.Hour, StateInFlight)
	if err := st.Release(ctx, "huge", c.Token); err != nil {
		t.Fatal(err)
	}
}

// TestFileSweepDropsExpiredEntries: expired entries are dropped by the
// bounded sweep of later writes, without the store being full.
func TestFileSweepDropsExpiredEntries(t *testing.T) {
	ctx := context.Background()
	st := newFile(t, FileOptions{Path: tempDB(t)})
	for i := 0; i < 10; i++ {
		c := mustClaim(t, st, "rec-"+itoa(i), time.Hour, StateClaimed)
		if err := st.Record(ctx, "rec-"+itoa(i), c.Token, testRecord("x"), 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, st, "mark-"+itoa(i), 50*time.Millisecond, StateClaimed)
	}
	n := 0
	eventually(t, "the expired entries to be swept", func() bool {
		n++
		mustClaim(t, st, "probe-"+itoa(n), time.Hour, StateClaimed)
		recs, marks := st.Len()
		return recs == 0 && marks == n && st.Bytes() == 0
	})
}

// TestFileCloseWakesWaiters: Close ends every Wait; later calls fail with
// ErrClosed and the Guard fails closed; the mark survives in the file.
func TestFileCloseWakesWaiters(t *testing.T) {
	opts := FileOptions{Path: tempDB(t)}
	st := newFile(t, opts)
	ctx := context.Background()
	c := mustClaim(t, st, "id", time.Hour, StateClaimed)
	const waiters = 5
	done := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		go func() { done <- st.Wait(ctx, "id") }()
	}
	eventually(t, "the waiters to wait", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.waiters["id"] != nil && st.waiters["id"].n == waiters
	})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < waiters; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(patience):
			t.Fatal("waiter not woken by Close")
		}
	}
	if _, err := st.Claim(ctx, "id", time.Hour); !errors.Is(err, ErrClosed) {
		t.Fatalf("Claim after Close: %v", err)
	}
	for name, err := range map[string]error{
		"Record":  st.Record(ctx, "id", c.Token, testRecord("x"), time.Hour),
		"Release": st.Release(ctx, "id", c.Token),
		"Wait":    st.Wait(ctx, "id"),
		"Ping":    st.Ping(ctx),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	f := loadFixture(t)
	a := newAgent(f.Result)
	req := f.request(t, `1`)
	if _, err := New(st, Options{}).Do(ctx, req, a.forward(req)); codeOf(err) != CodeStoreUnavailable || a.count() != 0 {
		t.Fatalf("Do on a closed store: %v", err)
	}
	st2 := newFile(t, opts)
	mustClaim(t, st2, "id", time.Hour, StateInFlight)
	if err := st2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFileConcurrentClaimsOneHolder: many goroutines claim one id at once:
// exactly one holds it; through the Guard, many callers of a few keys cause
// one forward per key.
func TestFileConcurrentClaimsOneHolder(t *testing.T) {
	st := newFile(t, FileOptions{Path: tempDB(t)})
	const n = 40
	var wg sync.WaitGroup
	states := make(chan ClaimState, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.Claim(context.Background(), "one", time.Hour)
			if err != nil {
				t.Error(err)
			}
			states <- c.State
		}()
	}
	wg.Wait()
	close(states)
	claimed := 0
	for s := range states {
		if s == StateClaimed {
			claimed++
		} else if s != StateInFlight {
			t.Fatalf("state %v", s)
		}
	}
	if claimed != 1 {
		t.Fatalf("%d holders, want 1", claimed)
	}

	f := loadFixture(t)
	a := newAgent(f.Result)
	g := New(st, Options{})
	const keys, callers = 4, 10
	perKey := make([][]<-chan doResult, keys)
	for i := 0; i < callers; i++ { // the keys' callers interleaved
		for k := 0; k < keys; k++ {
			req := withKey(f.request(t, itoa(i)), "key-"+itoa(k))
			perKey[k] = append(perKey[k], goDo(context.Background(), g, req, a.forward(req)))
		}
	}
	for k, results := range perKey {
		if fresh := awaitSameResults(t, results, "key-"+itoa(k)); fresh != 1 {
			t.Fatalf("key-%d: %d fresh answers, want 1", k, fresh)
		}
	}
	if a.count() != keys {
		t.Fatalf("forwards = %d, want %d", a.count(), keys)
	}
}

// TestFileCrashedProcess: a process that claims and records, then exits
// without Close (a crash), leaves both in the file, and its lock is gone.
func TestFileCrashedProcess(t *testing.T) {
	path := tempDB(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFileHelperProcess$")
	cmd.Env = append(os.Environ(), "IDEMPOTENCY_FILE_HELPER="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // if the test fails early
	out := bufio.NewReader(stdout)
	var seen []string
	for {
		line, err := out.ReadString('\n')
		if line == "ready\n" {
			break
		}
		seen = append(seen, line)
		if err != nil {
			_ = cmd.Wait()
			t.Fatalf("helper did not get ready: %q", seen)
		}
	}
	// While the other process holds the file, opening it fails.
	if _, err := NewFileStore(FileOptions{Path: path, OpenTimeout: 100 * time.Millisecond}); err == nil ||
		!strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("open while another process holds the file: %v", err)
	}
	_ = stdin.Close() // the helper exits without Close
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	st := newFile(t, FileOptions{Path: path})
	mustClaim(t, st, "in-flight", time.Hour, StateInFlight)
	if got := mustClaim(t, st, "recorded", time.Hour, StateRecorded); !reflect.DeepEqual(*got.Record, testRecord("helper")) {
		t.Fatalf("record: %+v", got.Record)
	}
}

// TestFileHelperProcess is the other process of TestFileCrashedProcess.
func TestFileHelperProcess(t *testing.T) {
	path := os.Getenv("IDEMPOTENCY_FILE_HELPER")
	if path == "" {
		t.Skip("helper process only")
	}
	st, err := NewFileStore(FileOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mustClaim(t, st, "in-flight", time.Hour, StateClaimed)
	c := mustClaim(t, st, "recorded", time.Hour, StateClaimed)
	if err := st.Record(ctx, "recorded", c.Token, testRecord("helper"), time.Hour); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
	os.Exit(0)                                        // a crash: no Close
}

// TestFileNoGoroutineLeft: the store starts no goroutine of its own; none is
// left after waits end and the store is closed.
func TestFileNoGoroutineLeft(t *testing.T) {
	before := runtime.NumGoroutine()
	st, err := NewFileStore(FileOptions{Path: tempDB(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := mustClaim(t, st, "id", time.Hour, StateClaimed)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if err := st.Wait(wctx, "id"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v", err)
	}
	cancel()
	if err := st.Record(ctx, "id", c.Token, testRecord("x"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := len(st.waiters); n != 0 {
		t.Fatalf("%d waiter entries left", n)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the goroutine count to return to its start", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// BenchmarkFileClaimRecord is one confirm's store cost: a Claim and a Record,
// two fsync'd transactions, then a replaying Claim (read-only).
func BenchmarkFileClaimRecord(b *testing.B) {
	st := newFile(b, FileOptions{Path: tempDB(b), MaxEntries: b.N + 10, MaxEntriesPerGroup: b.N + 10})
	ctx := context.Background()
	rec := testRecord("fp")
	for i := 0; i < b.N; i++ {
		id := "id-" + itoa(i)
		c, err := st.Claim(ctx, id, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Record(ctx, id, c.Token, rec, time.Hour); err != nil {
			b.Fatal(err)
		}
		if r, err := st.Claim(ctx, id, time.Minute); err != nil || r.State != StateRecorded {
			b.Fatal(r.State, err)
		}
	}
}
