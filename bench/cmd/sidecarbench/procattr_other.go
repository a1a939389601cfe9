//go:build !linux

package main

import "os/exec"

// setParentDeathSignal is Linux only; elsewhere children are stopped by
// teardown alone.
func setParentDeathSignal(*exec.Cmd) {}
