// The JSON door of `run`: a duplicate key in a supervaizer_auth handler is
// refused before Caddy loads the file (Caddy would keep the last one
// without a word: duplicates.go).

package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// RunPrecheck is called by the binary's main with its arguments before
// Caddy's command line runs. For `run` and `start` it reads the arguments
// with Caddy's own flags for that command (so `-cfile`, `-ec file`,
// `--config=file` read as Caddy reads them) and checks the config Caddy
// would load: the autosaved one with --resume when it exists, else the
// --config file, else a Caddyfile in the working directory (adapted as
// Caddy would: --adapter, or a name starting with "Caddyfile"). A JSON
// config's supervaizer_auth handler giving a key twice, or two keys equal
// but for letter case, is refused, naming them (a Caddyfile's adaptation
// never writes a key twice); so is a JSON config on standard input
// (--config -), which cannot be read twice. Any config whose HTTP server
// listens on a TCP address another process already listens on is refused,
// naming it (listenInUse). Not seen here: a config loaded later through
// Caddy's admin API, or reloaded by --watch: `supervaizer check` reports
// the key problems for a file.
func RunPrecheck(args []string) error {
	if len(args) == 0 || (args[0] != "run" && args[0] != "start") {
		return nil
	}
	c, ok := caddycmd.Commands()[args[0]]
	if !ok || c.CobraFunc == nil {
		return nil
	}
	cmd := &cobra.Command{Use: args[0]}
	c.CobraFunc(cmd)
	fs := cmd.Flags()
	fs.SetOutput(io.Discard)
	if fs.Parse(args[1:]) != nil {
		return nil // Caddy reports its own usage error
	}
	file, _ := fs.GetString("config")
	adapter, _ := fs.GetString("adapter")
	if resume, _ := fs.GetBool("resume"); resume {
		if _, err := os.Stat(caddy.ConfigAutosavePath); err == nil {
			file, adapter = caddy.ConfigAutosavePath, ""
		}
	}
	if file == "" {
		// Caddy's default: a Caddyfile in the working directory.
		if _, err := os.Stat("Caddyfile"); err != nil {
			return nil
		}
		file = "Caddyfile"
	}
	if adapter == "" && strings.HasPrefix(filepath.Base(file), "Caddyfile") {
		adapter = "caddyfile" // Caddy picks it from the name
	}
	isJSON := adapter == "" || adapter == "json"
	if file == "-" {
		if isJSON {
			return fmt.Errorf("supervaizer-sidecar: a JSON config on standard input (--config -) cannot be checked before Caddy reads it: give it as a file")
		}
		return nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil // Caddy reports it
	}
	if isJSON {
		if err := precheckProblems(file, duplicateKeyProblems(raw)); err != nil {
			return err
		}
	} else {
		a := caddyconfig.GetAdapter(adapter)
		if a == nil {
			return nil // Caddy reports it
		}
		if raw, _, err = a.Adapt(raw, map[string]any{"filename": file}); err != nil {
			return nil // Caddy reports it
		}
	}
	return listenInUse(file, raw)
}

// listenInUse refuses a config whose HTTP server would listen on a TCP
// address another process already listens on. Caddy binds with
// SO_REUSEPORT on Linux, so a second sidecar on the same port would start
// without a word and take half of the first one's connections (with a
// local-mode config: token-less calls allowed on it). Before this process
// binds anything, an address in use is another process's: binding it
// without SO_REUSEPORT fails with EADDRINUSE. The listener is closed at
// once. Reloads of a running process (the admin API, --watch) do not pass
// here: the process keeps its own sockets. Other bind errors (a privileged
// port) are left to Caddy, which reports them.
func listenInUse(file string, cfgJSON []byte) error {
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if json.Unmarshal(cfgJSON, &cfg) != nil {
		return nil // Caddy reports it
	}
	repl := caddy.NewReplacer()
	problems := map[string]string{}
	for name, srv := range cfg.Apps.HTTP.Servers {
		for _, l := range srv.Listen {
			na, err := caddy.ParseNetworkAddress(repl.ReplaceAll(l, ""))
			if err != nil || (na.Network != "" && !strings.HasPrefix(na.Network, "tcp")) {
				continue // Caddy reports a bad one; unix sockets, UDP, fds are not probed
			}
			network := na.Network
			if network == "" {
				network = "tcp"
			}
			for port := na.StartPort; port <= na.EndPort; port++ {
				addr := net.JoinHostPort(na.Host, strconv.FormatUint(uint64(port), 10))
				ln, err := net.Listen(network, addr)
				if err == nil {
					ln.Close()
					continue
				}
				if errors.Is(err, syscall.EADDRINUSE) {
					problems["apps.http.servers."+name+".listen"] = "address " + addr +
						" is already in use by another process (refused: a second sidecar on it would share its connections; stop the other process or choose another port)"
				}
			}
		}
	}
	return precheckProblems(file, problems)
}

// precheckProblems is RunPrecheck's error for problems (by handler path),
// nil when there are none.
func precheckProblems(file string, problems map[string]string) error {
	if len(problems) == 0 {
		return nil
	}
	paths := make([]string, 0, len(problems))
	for p := range problems {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	fmt.Fprintf(&b, "supervaizer-sidecar: %s: refused before loading:", file)
	for _, p := range paths {
		fmt.Fprintf(&b, "\n  %s: %s", p, problems[p])
	}
	return fmt.Errorf("%s", b.String())
}
