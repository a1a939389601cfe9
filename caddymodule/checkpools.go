// The stores `supervaizer check` builds: a file store is not opened.

package caddymodule

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/references"
)

// checkPools are the pools of `supervaizer check` (CheckProvision): as
// Provision's, except that an idempotency or references file store is not
// opened, since its lock is the running sidecar's (a check in a live pod
// would fail on it, and a check holding it would make a sidecar starting
// meanwhile fail), nor created: its path is checked instead (checkFilePath)
// and a memory store stands in while the gate is built.
type checkPools struct{ pools }

func (c checkPools) IdempotencyStore(ic *config.IdempotencyConfig, serverID string) (idempotency.Store, func(), error) {
	if ic.Store != "file" {
		return c.pools.IdempotencyStore(ic, serverID)
	}
	if _, err := storeIdentity(ic, serverID, ""); err != nil { // no path: start-up's own refusal (idemstore.go)
		return nil, nil, fmt.Errorf("supervaizer_auth: %w", err)
	}
	if err := checkFilePath("idempotency", ic.FilePath); err != nil {
		return nil, nil, err
	}
	st := idempotency.NewMemoryStore(ic.MemoryLimits())
	return st, func() { _ = st.Close() }, nil
}

func (c checkPools) ReferencesStore(e config.EffectiveReferences, lim references.Limits, serverID string) (references.Store, func(), error) {
	if e.Store != "file" {
		return c.pools.ReferencesStore(e, lim, serverID)
	}
	if err := checkFilePath("references", e.FilePath); err != nil {
		return nil, nil, err
	}
	return references.NewMemoryStore(lim), func() {}, nil
}

// checkFilePath reports, naming block's file_path (a path is there: start-up
// refuses a file store without one, storeIdentity and config.Validate),
// what would keep its file store from opening that check can see without
// opening it: a path that is not a regular file, a directory that is missing, not a
// directory, or not writable by this process (the store creates the file
// and its lock there).
func checkFilePath(block, path string) error {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("supervaizer_auth: %s file_path %q is not a regular file", block, path)
	} else if err == nil && fi.Size() > 0 && !boltFile(path) {
		return fmt.Errorf("supervaizer_auth: %s file_path %q is not a store file (no bbolt header): the store would refuse to open it", block, path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("supervaizer_auth: %s file_path %q: its directory: %w", block, path, err)
	case !fi.IsDir():
		return fmt.Errorf("supervaizer_auth: %s file_path %q: %s is not a directory", block, path, dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("supervaizer_auth: %s file_path %q: directory %s is not writable: %w", block, path, dir, err)
	}
	return nil
}

// boltMagic is bbolt's file magic, the first field of the meta page that
// opens every bbolt file, after the page's 16-byte header, in the
// machine's byte order (go.etcd.io/bbolt, internal/common).
const boltMagic = 0xED0CDAED

// boltFile reports whether path starts with a bbolt meta page. It reads
// the bytes without the file's lock (bbolt's lock is advisory): a running
// sidecar's store is read, never changed.
func boltFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [20]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false
	}
	return binary.NativeEndian.Uint32(head[16:]) == boltMagic
}
