package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/supervaize/supervaizer-sidecar/caddymodule"
	_ "github.com/supervaize/supervaizer-sidecar/caddymodule/logwriter"
)

// TestGeneratedCaddyfiles: every Caddyfile the load run can generate (each
// -logconf and -log, reverse_proxy's logger excluded or not, the main
// process's sites and the twin's) adapts and provisions, and excludes
// reverse_proxy's logger from every log exactly when asked.
func TestGeneratedCaddyfiles(t *testing.T) {
	e := &env{dir: t.TempDir(), upstreamAddr: "127.0.0.1:9", redisAddr: "127.0.0.1:6379"}
	e.cfg = &config{tokens: 1}
	if err := e.makeTokens(); err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for i, s := range []string{siteB, siteC, siteCFan, siteD, siteE, siteFMem, siteFRedis, siteM} {
		ports[s] = 40000 + i
	}
	for _, conf := range []string{"shipped", "single"} {
		for _, mode := range []string{"", "buffered", "file", "discard"} {
			for _, excludeRP := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/log=%s/excludeRP=%v", conf, mode, excludeRP), func(t *testing.T) {
					e.cfg.logConf, e.cfg.logMode = conf, mode
					cf := e.caddyfile(ports, 45000, "sidecar", excludeRP)
					adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
					if err != nil {
						t.Fatalf("adapt: %v\n%s", err, cf)
					}
					var cfg caddy.Config
					if err := json.Unmarshal(adapted, &cfg); err != nil {
						t.Fatal(err)
					}
					if err := caddy.Validate(&cfg); err != nil {
						t.Fatalf("validate: %v\n%s", err, cf)
					}
					if cfg.Logging == nil || len(cfg.Logging.Logs) == 0 {
						t.Fatalf("no logs:\n%s", adapted)
					}
					var admitting []string
					for name, l := range cfg.Logging.Logs {
						if admits(l.Include, l.Exclude, "http.handlers.reverse_proxy") {
							admitting = append(admitting, name)
						}
					}
					if (len(admitting) == 0) != excludeRP {
						t.Errorf("logs admitting reverse_proxy's logger: %v, want any: %v\n%s", admitting, !excludeRP, cf)
					}
				})
			}
		}
	}
}

// admits reports whether a log with these include and exclude lists takes
// the logger name, by Caddy's rule: an entry names a logger or a parent of
// it (dot-separated); with an include list, an include must match and be
// longer than the longest matching exclude; without one, no exclude may match.
func admits(include, exclude []string, name string) bool {
	longest := func(list []string) int {
		best := 0
		for _, p := range list {
			if name == p || strings.HasPrefix(name, p+".") {
				best = max(best, len(p))
			}
		}
		return best
	}
	if len(include) == 0 {
		return longest(exclude) == 0
	}
	in := longest(include)
	return in > 0 && in > longest(exclude)
}
