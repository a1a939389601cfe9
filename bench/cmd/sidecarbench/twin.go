package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The twin is a second sidecar process serving B and C only, with the
// same global options as the main one but reverse_proxy's per-request
// logger the other way round: included when the main process excludes it
// (-logconf shipped), excluded when it includes it (-logconf single). Its
// scenarios (twinName) run interleaved with the others, so B and C are
// compared like with like under both logging choices in the same rounds.

// twinBases are the sites the twin serves.
var twinBases = []string{siteB, siteC}

// twinSuffix names the twin's reverse_proxy logging.
func (e *env) twinSuffix() string {
	if e.cfg.logConf == "shipped" {
		return "-rplog" // the twin includes reverse_proxy's logger
	}
	return "-norplog"
}

// twinName is the scenario name of base served by the twin.
func (e *env) twinName(base string) string { return base + e.twinSuffix() }

// twinBase returns the base site of a twin scenario name.
func (e *env) twinBase(name string) (string, bool) {
	if e.twin == nil {
		return "", false
	}
	base, ok := strings.CutSuffix(name, e.twinSuffix())
	return base, ok
}

// startTwin writes the twin's Caddyfile and starts it (admin on loopback
// when the main process has it).
func (e *env) startTwin() error {
	e.twinPorts = map[string]int{}
	for _, b := range twinBases {
		p, err := freePort()
		if err != nil {
			return err
		}
		e.twinPorts[b] = p
	}
	if e.adminPort != 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		e.twinAdmin = p
	}
	conf := filepath.Join(e.dir, "Caddyfile.twin")
	if err := os.WriteFile(conf, []byte(e.caddyfile(e.twinPorts, e.twinAdmin, "twin", e.cfg.logConf != "shipped")), 0o600); err != nil {
		return err
	}
	var err error
	if e.twin, err = startChild("twin", e.dir, e.cfg.sidecarEnv, e.cfg.sidecarBin, "run", "--config", conf, "--adapter", "caddyfile"); err != nil {
		return err
	}
	for _, port := range e.twinPorts {
		if err := waitListen(e.twin, fmt.Sprintf("127.0.0.1:%d", port), 20*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// procOf is the sidecar process serving site and its admin port (0: none).
func (e *env) procOf(site string) (*child, int) {
	if _, ok := e.twinBase(site); ok {
		return e.twin, e.twinAdmin
	}
	return e.sidecar, e.adminPort
}
