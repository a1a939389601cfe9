package idempotency

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The on-disk layout of a FileStore (see FileStore). Changing the encoding of
// a bucket's keys or values requires a new fileLayoutVersion: a file of an
// unknown version is refused.
const fileLayoutVersion = "1"

var (
	bucketMeta   = []byte("meta")
	bucketRecs   = []byte("recs")
	bucketMarks  = []byte("marks")
	bucketExpiry = []byte("expiry")
	keyVersion   = []byte("version")
)

// Kinds of an expiry index key.
const (
	kindRec  byte = 'r'
	kindMark byte = 'm'
)

// Sweep bounds: expired entries dropped per write transaction, and when the
// store is full.
const (
	sweepBatch     = 32
	fullSweepBatch = 1024
)

// fileRec is the JSON value of bucket "recs". Result is the record's result
// bytes as a JSON string, so a replay after a restart is byte-identical (a
// json.RawMessage field would be compacted and HTML-escaped by
// encoding/json). Expires is unix ms; Size is what the record adds to
// FileStore.bytes (Record.size plus the id length).
type fileRec struct {
	Fingerprint string      `json:"fp"`
	Status      int         `json:"status"`
	Header      http.Header `json:"header,omitempty"`
	Result      string      `json:"result"`
	Expires     int64       `json:"exp"`
	Group       string      `json:"group"`
	Size        int64       `json:"size"`
}

// fileMark is the JSON value of bucket "marks". Expires is unix ms.
type fileMark struct {
	Token   string `json:"token"`
	Expires int64  `json:"exp"`
	Group   string `json:"group"`
}

func newFileRec(rec *Record, id string, expires int64) fileRec {
	return fileRec{
		Fingerprint: rec.Fingerprint,
		Status:      rec.Status,
		Header:      rec.Header,
		Result:      string(rec.Result),
		Expires:     expires,
		Size:        rec.size() + int64(len(id)),
	}
}

// record returns the Record of r (r was just decoded: nothing is shared).
func (r fileRec) record() *Record {
	var result json.RawMessage
	if r.Result != "" {
		result = json.RawMessage(r.Result)
	}
	return &Record{Fingerprint: r.Fingerprint, Status: r.Status, Header: r.Header, Result: result}
}

// live: an entry lives while now < Expires (MemoryStore's now.Before).
func (r fileRec) live(now int64) bool  { return now < r.Expires }
func (m fileMark) live(now int64) bool { return now < m.Expires }

// expiryKey is the index key of an entry: 8-byte big-endian expiry (unix
// ms), the kind, the id.
func expiryKey(expires int64, kind byte, id string) []byte {
	k := make([]byte, 9, 9+len(id))
	binary.BigEndian.PutUint64(k, uint64(expires))
	k[8] = kind
	return append(k, id...)
}

// fileTx is one transaction over the layout, with the changes it makes to
// the FileStore's counts; they are applied only once it has committed.
type fileTx struct {
	s                   *FileStore
	now                 int64
	recs, marks, expiry *bolt.Bucket

	changed        bool
	dRecs, dMarks  int
	dBytes         int64
	dGroups        map[string]int
	dGroupBytes    map[string]int64
	wake           []string
	errAfterCommit error
}

func (s *FileStore) bind(tx *bolt.Tx, now int64) *fileTx {
	return &fileTx{
		s: s, now: now, dGroups: map[string]int{}, dGroupBytes: map[string]int64{},
		recs: tx.Bucket(bucketRecs), marks: tx.Bucket(bucketMarks), expiry: tx.Bucket(bucketExpiry),
	}
}

// update runs f in one read-write transaction (fsync'd at commit) and, once
// committed, applies its count changes and wakes the waiters of the marks it
// removed. Called with s.mu held. If f fails nothing is written.
func (s *FileStore) update(now int64, f func(t *fileTx) error) error {
	var t *fileTx
	err := s.db.Update(func(tx *bolt.Tx) error {
		t = s.bind(tx, now)
		return f(t)
	})
	if err != nil {
		return err
	}
	s.recs += t.dRecs
	s.marks += t.dMarks
	s.bytes += t.dBytes
	for g, d := range t.dGroups {
		if s.groups[g] += d; s.groups[g] <= 0 {
			delete(s.groups, g)
		}
	}
	for g, d := range t.dGroupBytes {
		if s.groupBytes[g] += d; s.groupBytes[g] <= 0 {
			delete(s.groupBytes, g)
		}
	}
	for _, id := range t.wake {
		s.wake(id)
	}
	return t.errAfterCommit
}

// refuseFull ends a Claim on a full store (ErrStoreFull) or group
// (*ShareFullError) with err: the transaction commits if it dropped
// expired entries, else it rolls back.
func (t *fileTx) refuseFull(err error) error {
	if !t.changed {
		return err
	}
	t.errAfterCommit = err
	return nil
}

// groupBytes is the bytes of group's records, with the transaction's changes.
func (t *fileTx) groupBytes(group string) int64 {
	return t.s.groupBytes[group] + t.dGroupBytes[group]
}

// full is MemoryStore's full condition (memory.go, ClaimGroup), with the
// transaction's changes.
func (t *fileTx) full() bool {
	s := t.s
	return s.recs+t.dRecs+s.marks+t.dMarks >= s.maxEntries || s.bytes+t.dBytes >= s.maxBytes
}

// groupFull: group holds its entries share, with the transaction's changes.
func (t *fileTx) groupFull(group string) bool {
	return t.s.groups[group]+t.dGroups[group] >= t.s.maxPerGroup
}

// sweepWhile drops expired entries, oldest expiry first, in batches of
// fullSweepBatch, while over() holds and expired entries remain: a store
// refuses for fullness only once nothing expired is left to drop. The
// index is ordered by expiry across groups, so a group's own expired
// entries may sit behind every other group's: stopping after one batch
// would let a neighbour's expired flood keep a group over its share. Each
// entry is dropped once, so the work is bounded by the entries written.
func (t *fileTx) sweepWhile(over func() bool) error {
	for over() {
		n, err := t.sweepN(fullSweepBatch)
		if err != nil || n < fullSweepBatch {
			return err
		}
	}
	return nil
}

func (t *fileTx) getRec(id string) (fileRec, bool, error) {
	var r fileRec
	v := t.recs.Get([]byte(id))
	if v == nil {
		return r, false, nil
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, false, fmt.Errorf("undecodable record %q: %w", id, err)
	}
	return r, true, nil
}

func (t *fileTx) getMark(id string) (fileMark, bool, error) {
	var m fileMark
	v := t.marks.Get([]byte(id))
	if v == nil {
		return m, false, nil
	}
	if err := json.Unmarshal(v, &m); err != nil {
		return m, false, fmt.Errorf("undecodable in-flight mark %q: %w", id, err)
	}
	return m, true, nil
}

// liveMark returns id's mark if token is its live claim, else ErrClaimLost
// (store.go, fencing).
func (t *fileTx) liveMark(id, token string) (fileMark, error) {
	m, ok, err := t.getMark(id)
	if err != nil {
		return m, err
	}
	if !ok || m.Token != token || !m.live(t.now) {
		return m, ErrClaimLost
	}
	return m, nil
}

func (t *fileTx) putRec(id string, r fileRec) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	if err := t.recs.Put([]byte(id), v); err != nil {
		return err
	}
	if err := t.expiry.Put(expiryKey(r.Expires, kindRec, id), []byte{}); err != nil {
		return err
	}
	t.changed = true
	t.dRecs++
	t.dBytes += r.Size
	t.dGroups[r.Group]++
	t.dGroupBytes[r.Group] += r.Size
	return nil
}

func (t *fileTx) putMark(id string, m fileMark) error {
	v, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode in-flight mark: %w", err)
	}
	if err := t.marks.Put([]byte(id), v); err != nil {
		return err
	}
	if err := t.expiry.Put(expiryKey(m.Expires, kindMark, id), []byte{}); err != nil {
		return err
	}
	t.changed = true
	t.dMarks++
	t.dGroups[m.Group]++
	return nil
}

func (t *fileTx) delRec(id string, r fileRec) error {
	if err := t.recs.Delete([]byte(id)); err != nil {
		return err
	}
	if err := t.expiry.Delete(expiryKey(r.Expires, kindRec, id)); err != nil {
		return err
	}
	t.changed = true
	t.dRecs--
	t.dBytes -= r.Size
	t.dGroups[r.Group]--
	t.dGroupBytes[r.Group] -= r.Size
	return nil
}

// delMark removes a mark; its waiters are woken after the commit.
func (t *fileTx) delMark(id string, m fileMark) error {
	if err := t.marks.Delete([]byte(id)); err != nil {
		return err
	}
	if err := t.expiry.Delete(expiryKey(m.Expires, kindMark, id)); err != nil {
		return err
	}
	t.changed = true
	t.dMarks--
	t.dGroups[m.Group]--
	t.wake = append(t.wake, id)
	return nil
}

// dropRec removes id's record, if any.
func (t *fileTx) dropRec(id string) error {
	r, ok, err := t.getRec(id)
	if err != nil || !ok {
		return err
	}
	return t.delRec(id, r)
}

// dropExpiredID removes id's expired record and mark (the lazy drop of a
// Claim that found them).
func (t *fileTx) dropExpiredID(id string) error {
	if r, ok, err := t.getRec(id); err != nil {
		return err
	} else if ok && !r.live(t.now) {
		if err := t.delRec(id, r); err != nil {
			return err
		}
	}
	if m, ok, err := t.getMark(id); err != nil {
		return err
	} else if ok && !m.live(t.now) {
		return t.delMark(id, m)
	}
	return nil
}

// sweep drops up to limit expired entries, oldest expiry first, from the
// expiry index: O(expired dropped), not O(entries).
func (t *fileTx) sweep(limit int) error {
	_, err := t.sweepN(limit)
	return err
}

// sweepN is sweep, returning the number of expired index keys it dropped.
func (t *fileTx) sweepN(limit int) (int, error) {
	var keys [][]byte
	c := t.expiry.Cursor()
	for k, _ := c.First(); k != nil && len(keys) < limit; k, _ = c.Next() {
		if len(k) < 9 {
			return 0, fmt.Errorf("corrupt expiry index key %x", k)
		}
		if int64(binary.BigEndian.Uint64(k)) > t.now {
			break
		}
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := t.sweepKey(k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// sweepKey drops the expired entry of index key k (k alone if it is stale).
func (t *fileTx) sweepKey(k []byte) error {
	expires, kind, id := int64(binary.BigEndian.Uint64(k)), k[8], string(k[9:])
	switch kind {
	case kindRec:
		if r, ok, err := t.getRec(id); err != nil || (ok && r.Expires == expires) {
			if err != nil {
				return err
			}
			return t.delRec(id, r)
		}
	case kindMark:
		if m, ok, err := t.getMark(id); err != nil || (ok && m.Expires == expires) {
			if err != nil {
				return err
			}
			return t.delMark(id, m)
		}
	default:
		return fmt.Errorf("corrupt expiry index key %x", k)
	}
	t.changed = true
	return t.expiry.Delete(k)
}

// load checks (or creates) the layout, counts the entries held and drops the
// expired ones, in one transaction.
func (s *FileStore) load() error {
	if err := s.db.Update(s.checkLayout); err != nil {
		return err
	}
	err := s.update(time.Now().UnixMilli(), func(t *fileTx) error { return t.countAndDrop() })
	if err != nil {
		return fmt.Errorf("idempotency: file store %s: %w", s.path, err)
	}
	return nil
}

// countAndDrop counts every entry, then drops the expired ones.
func (t *fileTx) countAndDrop() error {
	var expiredRecs, expiredMarks []string
	err := t.recs.ForEach(func(k, _ []byte) error {
		r, _, err := t.getRec(string(k))
		if err != nil {
			return err
		}
		t.dRecs++
		t.dBytes += r.Size
		t.dGroups[r.Group]++
		t.dGroupBytes[r.Group] += r.Size
		if !r.live(t.now) {
			expiredRecs = append(expiredRecs, string(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = t.marks.ForEach(func(k, _ []byte) error {
		m, _, err := t.getMark(string(k))
		if err != nil {
			return err
		}
		t.dMarks++
		t.dGroups[m.Group]++
		if !m.live(t.now) {
			expiredMarks = append(expiredMarks, string(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range expiredRecs {
		if err := t.dropRec(id); err != nil {
			return err
		}
	}
	for _, id := range expiredMarks {
		if err := t.dropExpiredID(id); err != nil {
			return err
		}
	}
	return t.sweep(fullSweepBatch) // stale index keys, if any
}

// checkLayout creates the layout in an empty database, or checks that the
// database has this layout and version. It never deletes anything.
func (s *FileStore) checkLayout(tx *bolt.Tx) error {
	if tx.Bucket(bucketMeta) == nil {
		var other []string
		_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			other = append(other, string(name))
			return nil
		})
		if len(other) > 0 {
			sort.Strings(other)
			return fmt.Errorf("idempotency: file store %s: the file is a bbolt database of another layout "+
				"(buckets %q, no %q bucket); refusing to use it (it is left as it is)", s.path, other, bucketMeta)
		}
		for _, name := range [][]byte{bucketMeta, bucketRecs, bucketMarks, bucketExpiry} {
			if _, err := tx.CreateBucket(name); err != nil {
				return fmt.Errorf("idempotency: file store %s: create bucket %s: %w", s.path, name, err)
			}
		}
		return tx.Bucket(bucketMeta).Put(keyVersion, []byte(fileLayoutVersion))
	}
	if err := checkVersion(tx); err != nil {
		return fmt.Errorf("idempotency: file store %s: %w; refusing to use it (it is left as it is)", s.path, err)
	}
	for _, name := range [][]byte{bucketRecs, bucketMarks, bucketExpiry} {
		if tx.Bucket(name) == nil {
			return fmt.Errorf("idempotency: file store %s: layout version %s without bucket %q; refusing to use it", s.path, fileLayoutVersion, name)
		}
	}
	return nil
}

// checkVersion reads the layout version of the meta bucket.
func checkVersion(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return errors.New("no meta bucket")
	}
	if v := meta.Get(keyVersion); string(v) != fileLayoutVersion {
		return fmt.Errorf("layout version %q, this build reads version %q", v, fileLayoutVersion)
	}
	return nil
}
