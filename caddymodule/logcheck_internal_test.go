package caddymodule

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestDebugConfigLogWarnings: a log at DEBUG admitting http.auto_https
// (whose "adjusted config" line dumps the handler's JSON, secrets included)
// is warned about, by name; one at INFO, or excluding that logger, is
// not. The global debug option and log { level DEBUG }, adapted and set up
// by Caddy, are both caught.
func TestDebugConfigLogWarnings(t *testing.T) {
	for _, c := range []struct {
		log  logView
		warn bool
	}{
		{logView{name: "default", level: "DEBUG"}, true},
		{logView{name: "default", level: "debug"}, true},
		{logView{name: "default", level: "INFO"}, false},
		{logView{name: "default"}, false},
		{logView{name: "l", level: "DEBUG", include: []string{"http"}}, true},
		{logView{name: "l", level: "DEBUG", include: []string{"http.log.access"}}, false},
		{logView{name: "l", level: "DEBUG", exclude: []string{"http.auto_https"}}, false},
		{logView{name: "l", level: "DEBUG", exclude: []string{"http"}}, false},
		{logView{name: "l", level: "DEBUG", removed: credentialHeaders}, true}, // a header filter does not cover it
	} {
		got := debugConfigLogWarnings([]logView{c.log})
		if (len(got) == 1) != c.warn || len(got) > 1 {
			t.Errorf("%+v: %q, want a warning: %v", c.log, got, c.warn)
		}
		if c.warn && len(got) == 1 && (!strings.Contains(got[0], "log "+c.log.name+" ") || !strings.Contains(got[0], "http.auto_https")) {
			t.Errorf("%+v: %q does not name the log and the logger", c.log, got[0])
		}
	}
	for global, warn := range map[string]bool{
		"debug":                 true,
		"log {\nlevel DEBUG\n}": true,
		"log {\nlevel INFO\n}":  false,
		"admin off":             false,
		"log {\nlevel DEBUG\nexclude http.auto_https\n}": false,
	} {
		adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte("{\n"+global+"\n}\n:8080 {\nrespond ok\n}\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var cfg caddy.Config
		if err := json.Unmarshal(adapted, &cfg); err != nil {
			t.Fatal(err)
		}
		ctx, err := caddy.ProvisionContext(&caddy.Config{Logging: cfg.Logging})
		if err != nil {
			t.Fatal(err)
		}
		logs, ok := loggingOf(ctx)
		if !ok {
			t.Fatal("loggingOf could not read the config")
		}
		if got := debugConfigLogWarnings(logs); (len(got) > 0) != warn {
			t.Errorf("global options %q: %q, want a warning: %v", global, got, warn)
		}
	}
}

// TestLoggerAllowed holds the restated rule to Caddy's examples: no lists
// admit all, the longest namespace wins, an include list requires a match.
func TestLoggerAllowed(t *testing.T) {
	for _, c := range []struct {
		include, exclude []string
		name             string
		want             bool
	}{
		{nil, nil, "http.log.error", true},
		{nil, []string{"http.handlers.reverse_proxy"}, "http.handlers.reverse_proxy", false},
		{nil, []string{"http.handlers.reverse_proxy"}, "http.log.error.log0", true},
		{nil, []string{"http.log.access.log0"}, "http.log.access.log0", false},
		{nil, []string{"http.log.access.log0"}, "http.log.access.log1", true},
		{nil, []string{"http.log"}, "http.log.error", false},
		{nil, []string{"http.log.err"}, "http.log.error", true}, // a partial name is no namespace
		{nil, []string{"*"}, "http.log.error", false},
		{[]string{"http.log.access.log0"}, nil, "http.log.access.log0", true},
		{[]string{"http.log.access.log0"}, nil, "http.log.error.log0", false},
		{[]string{"http"}, []string{"http.log.error"}, "http.log.error.log0", false},
		{[]string{"http.log.error.log0"}, []string{"http.log"}, "http.log.error.log0", true},
		{[]string{"http.handlers.supervaizer_auth"}, nil, "http.handlers.reverse_proxy", false},
	} {
		if got := loggerAllowed(c.include, c.exclude, c.name); got != c.want {
			t.Errorf("include %v exclude %v: %s admitted = %v, want %v", c.include, c.exclude, c.name, got, c.want)
		}
	}
}

func TestRequestLoggerNames(t *testing.T) {
	if got := requestLoggerNames(nil); !slices.Equal(got, []string{"http.handlers.reverse_proxy", "http.log.error"}) {
		t.Errorf("no server logs: %v", got)
	}
	got := requestLoggerNames(&caddyhttp.ServerLogConfig{DefaultLoggerName: "log0",
		LoggerNames: map[string]caddyhttp.StringArray{"example.com": {"log1"}, "quiet.example": {""}}})
	want := []string{"http.handlers.reverse_proxy", "http.log.access", "http.log.access.log0", "http.log.access.log1",
		"http.log.error", "http.log.error.log0", "http.log.error.log1"}
	if !slices.Equal(got, want) {
		t.Errorf("requestLoggerNames = %v, want %v", got, want)
	}
}

func TestUnfilteredLogWarnings(t *testing.T) {
	both := credentialHeaders
	req := requestLoggerNames(&caddyhttp.ServerLogConfig{DefaultLoggerName: "log0"})
	for _, c := range []struct {
		name string
		logs []logView
		want []string // the log names warned about
	}{
		{"shipped", []logView{
			{name: "default", exclude: []string{"http.handlers.reverse_proxy", "http.log.access.log0"}, removed: both},
			{name: "log0", include: []string{"http.log.access.log0"}, removed: both},
			{name: "audit", include: []string{"http.handlers.supervaizer_auth"}},
		}, nil},
		{"Caddy's default log", []logView{{name: "default"}}, []string{"default"}},
		{"one header only", []logView{{name: "default", removed: []string{"X-Api-Key"}}}, []string{"default"}},
		{"access log unfiltered", []logView{
			{name: "default", exclude: []string{"http.log.access.log0"}, removed: both},
			{name: "log0", include: []string{"http.log.access.log0"}},
		}, []string{"log0"}},
		{"quiet level", []logView{{name: "default", level: "fatal"}}, nil},
		{"error level still gets error lines", []logView{{name: "default", level: "ERROR"}}, []string{"default"}},
		{"only the audit", []logView{{name: "default", include: []string{"http.handlers.supervaizer_auth", "admin"}}}, nil},
		{"reverse_proxy re-included unfiltered", []logView{
			{name: "default", exclude: []string{"http.log"}, removed: both},
			{name: "proxy", include: []string{"http.handlers.reverse_proxy"}},
		}, []string{"proxy"}},
	} {
		ws := unfilteredLogWarnings(c.logs, req)
		var got []string
		for _, w := range ws {
			name, _, _ := strings.Cut(strings.TrimPrefix(w, "log "), " ")
			got = append(got, name)
			if !strings.Contains(w, "X-Api-Key") || !strings.Contains(w, "docs/logging.md") {
				t.Errorf("%s: warning does not say what to do: %s", c.name, w)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: warned about %v, want %v\n%s", c.name, got, c.want, strings.Join(ws, "\n"))
		}
	}
}

// TestLoggingOf pins the reflection read of the logs Caddy provisioned:
// their lists and which credential headers their loaded encoder removes
// (a filter wrapping a filter counts both; other filters do not count).
func TestLoggingOf(t *testing.T) {
	var logging caddy.Logging
	if err := json.Unmarshal([]byte(`{"logs": {
		"default": {"writer": {"output": "stderr"}, "exclude": ["http.handlers.reverse_proxy"],
			"encoder": {"format": "filter", "wrap": {"format": "json"}, "fields": {
				"request>headers>X-Api-Key": {"filter": "delete"},
				"request>headers>X-Supervaize-Workspace-Authorization": {"filter": "replace", "value": "REDACTED"}}}},
		"nested": {"writer": {"output": "stderr"}, "include": ["http.log.access"],
			"encoder": {"format": "filter", "fields": {"request>headers>X-Api-Key": {"filter": "delete"}},
				"wrap": {"format": "filter", "wrap": {"format": "json"},
					"fields": {"request>headers>X-Supervaize-Workspace-Authorization": {"filter": "delete"}}}}},
		"hashed": {"writer": {"output": "stderr"}, "include": ["http.log.error"],
			"encoder": {"format": "filter", "wrap": {"format": "json"}, "fields": {
				"request>headers>X-Api-Key": {"filter": "ip_mask"}}}},
		"plain": {"writer": {"output": "stderr"}, "include": ["http.log.error"], "encoder": {"format": "json"}}
	}}`), &logging); err != nil {
		t.Fatal(err)
	}
	ctx, err := caddy.ProvisionContext(&caddy.Config{Logging: &logging})
	if err != nil {
		t.Fatal(err)
	}
	logs, ok := loggingOf(ctx)
	if !ok {
		t.Fatal("loggingOf could not read the config: Caddy's Context or BaseLog layout changed")
	}
	got := map[string]logView{}
	for _, l := range logs {
		got[l.name] = l
	}
	for name, want := range map[string][]string{"default": credentialHeaders, "nested": credentialHeaders, "hashed": nil, "plain": nil} {
		if !slices.Equal(got[name].removed, want) {
			t.Errorf("log %s removes %v, want %v", name, got[name].removed, want)
		}
	}
	if !slices.Equal(got["default"].exclude, []string{"http.handlers.reverse_proxy"}) || !slices.Equal(got["nested"].include, []string{"http.log.access"}) {
		t.Errorf("lists not read: %+v", got)
	}
	if _, ok := loggingOf(caddy.Context{}); ok {
		t.Error("loggingOf of a context without config: ok")
	}
}
