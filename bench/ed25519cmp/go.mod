module github.com/supervaize/supervaizer-sidecar/bench/ed25519cmp

go 1.26.0

require github.com/oasisprotocol/curve25519-voi v0.0.0-20230904125328-1f23a7beb09a

require (
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
