// The JSON door of `run`: a duplicate key in a supervaizer_auth handler is
// refused before Caddy loads the file (Caddy would keep the last one
// without a word: duplicates.go).

package cli

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// RunPrecheck is called by the binary's main with its arguments before
// Caddy's command line runs. For `run` (and `start`) with a JSON config
// (--config/-c ending in .json, or --adapter/-a json) it reads the file and
// refuses a supervaizer_auth handler that gives a key twice, naming the
// key; otherwise it does nothing (a Caddyfile's adaptation never writes a
// key twice; a file that cannot be read is Caddy's to report). A config
// loaded later through Caddy's admin API is not seen here: `supervaizer
// check` reports the same problem for a file before it is loaded.
func RunPrecheck(args []string) error {
	if len(args) == 0 || (args[0] != "run" && args[0] != "start") {
		return nil
	}
	file, adapter := runConfigFlags(args[1:])
	if file == "" || !(adapter == "json" || adapter == "" && strings.HasSuffix(file, ".json")) {
		return nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	problems := duplicateKeyProblems(raw)
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

// runConfigFlags returns the values of --config/-c and --adapter/-a in
// args, written `--config x` or `--config=x` (the forms Caddy's command
// line takes); the last one given wins, as with Caddy's flags.
func runConfigFlags(args []string) (file, adapter string) {
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		var dst *string
		switch name {
		case "--config", "-config", "-c":
			dst = &file
		case "--adapter", "-adapter", "-a":
			dst = &adapter
		default:
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		*dst = value
	}
	return file, adapter
}
