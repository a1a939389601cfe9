package main

import (
	"fmt"
	"path/filepath"
	"strings"
)

// globalLogs is the global log options of a generated Caddyfile, by -logconf:
//
//   - shipped: the two logs of Caddyfile.example's global block: the default
//     log (format filter deleting the Supervaizer credentials, excluding the
//     gate's logger and, with excludeRP, reverse_proxy's per-request logger)
//     and the audit log (the gate's lines, format json, behind the buffered
//     writer). Both write files in the temp dir instead of stderr/stdout.
//   - single: the bench's earlier config: one default log, format json,
//     level INFO, holding every logger (with excludeRP, all but
//     reverse_proxy's).
//
// -log changes the audit output: buffered (shipped's default), file (the
// same file without the buffer: one write per line; single's default), or
// discard.
func (e *env) globalLogs(name string, excludeRP bool) string {
	file := func(suffix string) string {
		return "file " + filepath.Join(e.dir, name+"-"+suffix+".log") + " {\nroll_size 200MiB\nroll_keep 1\n}"
	}
	mode := e.cfg.logMode
	if mode == "" {
		mode = map[string]string{"shipped": "buffered", "single": "file"}[e.cfg.logConf]
	}
	audit := "output " + file("audit")
	switch mode {
	case "buffered": // the buffered writer (caddymodule/logwriter/logwriter.go)
		audit = "output buffered {\nflush_interval 1s\noutput " + file("audit") + "\n}"
	case "discard":
		audit = "output discard"
	}
	rp := ""
	if excludeRP {
		rp = " http.handlers.reverse_proxy"
	}
	var b strings.Builder
	if e.cfg.logConf == "single" {
		fmt.Fprintf(&b, "log {\n%s\nformat json\nlevel INFO\n", audit)
		if excludeRP {
			b.WriteString("exclude" + rp + "\n")
		}
		b.WriteString("}\n")
	} else {
		fmt.Fprintf(&b, `log default {
output %s
format filter {
	wrap json
	fields {
		request>headers>X-Api-Key delete
		request>headers>X-Supervaize-Workspace-Authorization delete
	}
}
exclude%s http.handlers.supervaizer_auth
}
log audit {
%s
format json
include http.handlers.supervaizer_auth
}
`, file("default"), rp, audit)
	}
	return indentBlocks(b.String(), 1)
}

// indentBlocks indents Caddyfile text by its brace depth, starting at depth.
func indentBlocks(text string, depth int) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		line = strings.TrimSpace(line)
		d := depth
		if strings.HasPrefix(line, "}") {
			d--
		}
		b.WriteString(strings.Repeat("\t", max(d, 0)) + line + "\n")
		depth += strings.Count(line, "{") - strings.Count(line, "}")
	}
	return b.String()
}
