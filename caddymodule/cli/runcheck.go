// The JSON door of `run`: a duplicate key in a supervaizer_auth handler is
// refused before Caddy loads the file (Caddy would keep the last one
// without a word: duplicates.go).

package cli

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// RunPrecheck is called by the binary's main with its arguments before
// Caddy's command line runs. For `run` and `start` it reads the arguments
// with Caddy's own flags for that command (so `-cfile`, `-ec file`,
// `--config=file` read as Caddy reads them) and checks the config Caddy
// would load: the autosaved one with --resume when it exists, else the
// --config file unless an adapter other than json is named (a Caddyfile's
// adaptation never writes a key twice; a file that is not JSON holds no
// handler to check). A supervaizer_auth handler giving a key twice, or two
// keys equal but for letter case, is refused, naming them; so is a JSON
// config on standard input (--config -), which cannot be read twice. Not
// seen here: a config loaded later through Caddy's admin API, or reloaded
// by --watch: `supervaizer check` reports the same problems for a file.
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
	if file == "" || adapter != "" && adapter != "json" {
		return nil
	}
	if file == "-" {
		return fmt.Errorf("supervaizer-sidecar: a JSON config on standard input (--config -) cannot be checked before Caddy reads it: give it as a file")
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil // Caddy reports it
	}
	return precheckProblems(file, duplicateKeyProblems(raw))
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
