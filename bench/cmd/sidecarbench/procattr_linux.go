//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill cmd if the bench dies first.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
