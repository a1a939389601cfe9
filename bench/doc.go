// Package bench holds the sidecar's performance harness: the load run
// (cmd/sidecarbench, driven by bench.mk and run.sh) and Go benchmarks of the
// idempotency memory store that need only its public API. See README.md.
package bench
