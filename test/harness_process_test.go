package test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/supervaize/supervaizer-sidecar/caddymodule/cli"
)

// cliExecEnv, set in the environment of a re-executed test binary, makes it
// the sidecar binary: Caddy's main with the standard modules and
// supervaizer_auth, which this package links like cmd/supervaizer-sidecar.
const cliExecEnv = "SIDECAR_TEST_EXEC_CADDY_MAIN"

func init() {
	if os.Getenv(cliExecEnv) == "1" {
		// As cmd/supervaizer-sidecar's main: the pre-check, then Caddy.
		if err := cli.RunPrecheck(os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", cli.BinaryName, err)
			os.Exit(1)
		}
		caddycmd.Main()
		os.Exit(0)
	}
}

// sidecarProcess is the sidecar binary (this test binary re-executed as
// Caddy's main, see cliExecEnv) running a Caddyfile, so a test can kill it
// like a crash and start it again.
type sidecarProcess struct {
	t    *testing.T
	cf   string // path of the Caddyfile
	base string
	cmd  *exec.Cmd
	logs bytes.Buffer
}

// startProcess starts the binary on cf and waits until port listens.
func startProcess(t *testing.T, cfPath string, port int) *sidecarProcess {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &sidecarProcess{t: t, cf: cfPath, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	p.cmd = exec.Command(bin, "run", "--config", cfPath, "--adapter", "caddyfile")
	p.cmd.Env = append(os.Environ(), cliExecEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	eventually(t, 30*time.Second, "the sidecar process to listen", func() bool {
		var c net.Conn
		if c, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
		}
		return err == nil
	}, func() string { return fmt.Sprintf("the sidecar process did not listen: %v\n%s", err, p.logs.String()) })
	return p
}

// kill ends the process with SIGKILL (a crash: no cleanup runs).
func (p *sidecarProcess) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// terminate sends the process SIGTERM (a graceful exit: Caddy's exit hooks
// run) and waits up to 30s for it to end.
func (p *sidecarProcess) terminate() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("the process did not exit on SIGTERM:\n%s", p.logs.String())
	}
}
