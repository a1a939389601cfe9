// Package observability_test checks the Prometheus alert rules and the
// Grafana dashboard of deploy/observability: every expression parses
// (promtool check rules), the alerts fire on the series they are written
// for (promtool test rules, alerts.test.yml), every supervaizer_sidecar_*
// metric they name is one gate/metrics.go registers, and the
// dashboard is an importable Grafana dashboard with the panels operators
// need.
//
//	go test -count=1 ./deploy/observability/
//
// promtool is required: Debian package prometheus (.ci/run installs it).
package observability_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	rulesFile     = "alerts.rules.yml"
	rulesTestFile = "alerts.test.yml"
	dashboardFile = "grafana-dashboard.json"
	metricsSource = "../../gate/metrics.go"
)

// promtool returns the promtool binary, or fails the test with the command
// that installs it: these checks are the only parse of the PromQL shipped.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		ci := ""
		if os.Getenv("CI") == "true" {
			ci = " (CI=true: .ci/run installs it; it must be present)"
		}
		t.Fatalf("promtool not found%s: install it with `apt-get install -y prometheus` (Debian/Ubuntu; or a Prometheus release's promtool on PATH)", ci)
	}
	return p
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// ruleFile is a Prometheus rules file, decoded strictly.
type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	var rf ruleFile
	if err := yaml.UnmarshalStrict(readFile(t, rulesFile), &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []rule
	for _, g := range rf.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rule", rulesFile)
	}
	return out
}

// TestAlertRulesPromtool: every rule parses, and the unit tests of
// alerts.test.yml pass (each alert fires on the series it is for, not on
// its look-alikes).
func TestAlertRulesPromtool(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
	runPromtool(t, "test", "rules", rulesTestFile)
}

// TestAlertRulesCover checks the alerts operators need are there, on the
// metrics they are about, each with a severity, a summary and a
// description, and each tested in alerts.test.yml.
func TestAlertRulesCover(t *testing.T) {
	rules := loadRules(t)
	tests := string(readFile(t, rulesTestFile))
	byName := map[string]rule{}
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		if _, dup := byName[r.Alert]; dup {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		byName[r.Alert] = r
		if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s: summary and description annotations are required", r.Alert)
		}
		if r.For != "" {
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
			}
		}
		if !strings.Contains(tests, "alertname: "+r.Alert+"\n") {
			t.Errorf("alert %s has no unit test in %s", r.Alert, rulesTestFile)
		}
	}
	for _, want := range []struct {
		alert string
		in    []string // substrings of the expression
	}{
		{"SupervaizerSidecarJWKSStale", []string{"supervaizer_sidecar_jwks_seconds_since_last_good_refresh >"}},
		{"SupervaizerSidecarDenialsSpike", []string{"supervaizer_sidecar_decisions_total", `outcome="deny"`, "by (namespace, code)"}},
		{"SupervaizerSidecarIdempotencyStoreUnavailable", []string{`code="idempotency_store_unavailable"`, `event="store_error"`}},
		{"SupervaizerSidecarContractExpanded", []string{"supervaizer_sidecar_contract_changes_total", `kind="expanding"`}},
		{"SupervaizerSidecarReadinessFlapping", []string{"changes(kube_pod_status_ready"}},
	} {
		r, ok := byName[want.alert]
		if !ok {
			t.Errorf("no alert %s", want.alert)
			continue
		}
		for _, s := range want.in {
			if !strings.Contains(r.Expr, s) {
				t.Errorf("alert %s: expression does not contain %q:\n%s", want.alert, s, r.Expr)
			}
		}
	}
}

// registeredMetrics parses gate/metrics.go for the names the module
// registers (namespace + Name), with the series names a histogram exposes.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	src := string(readFile(t, metricsSource))
	ns := regexp.MustCompile(`metricsNamespace\s*=\s*"([a-z_]+)"`).FindStringSubmatch(src)
	if ns == nil {
		t.Fatalf("%s: no metricsNamespace constant", metricsSource)
	}
	out := map[string]bool{}
	opts := regexp.MustCompile(`prometheus\.(\w+)Opts\{[^}]*?Name:\s*"([a-z_]+)"`)
	for _, m := range opts.FindAllStringSubmatch(src, -1) {
		name := ns[1] + "_" + m[2]
		out[name] = true
		if m[1] == "Histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				out[name+suffix] = true
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("%s: found only %v: the parse no longer matches the source", metricsSource, out)
	}
	return out
}

// externalMetrics are the metrics the rules use that other exporters
// provide.
var externalMetrics = map[string]string{
	"kube_pod_status_ready": "kube-state-metrics",
}

var metricName = regexp.MustCompile(`\b(supervaizer_sidecar_[a-z_]+|kube_[a-z_]+)\b`)

func checkMetricNames(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	for _, m := range metricName.FindAllString(expr, -1) {
		if !known[m] && externalMetrics[m] == "" {
			t.Errorf("%s: metric %s is neither registered in gate/metrics.go nor a known external metric", where, m)
		}
	}
}

// TestMetricNamesExist: rules and dashboard name only metrics that exist.
func TestMetricNamesExist(t *testing.T) {
	known := registeredMetrics(t)
	used := map[string]bool{}
	for _, r := range loadRules(t) {
		checkMetricNames(t, "rule "+r.Alert+r.Record, r.Expr, known)
		for _, m := range metricName.FindAllString(r.Expr, -1) {
			used[m] = true
		}
	}
	for _, q := range dashboardQueries(t, loadDashboard(t)) {
		checkMetricNames(t, q.where, q.expr, known)
		for _, m := range metricName.FindAllString(q.expr, -1) {
			used[m] = true
		}
	}
	// Every module metric is on the dashboard or in a rule.
	var missing []string
	for m := range known {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
		if !used[m] && !used[base] && !used[base+"_bucket"] {
			missing = append(missing, m)
		}
	}
	sort.Strings(missing)
	if len(missing) != 0 {
		t.Errorf("metrics neither charted nor alerted on: %q", missing)
	}
}

// --- the dashboard ---

type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct{ X, Y, W, H int }
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return &d
}

type query struct{ where, expr string }

// labelValues is a Grafana variable query label_values(<selector>, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// dashboardQueries lists every PromQL expression of the dashboard: panel
// targets and the selectors of label_values variable queries.
func dashboardQueries(t *testing.T, d *dashboard) []query {
	t.Helper()
	var out []query
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, query{fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: definition %q is not label_values(<selector>, <label>)", v.Name, v.Definition)
			continue
		}
		out = append(out, query{"variable " + v.Name, m[1]})
	}
	return out
}

// grafanaVars replaces Grafana's interval variables with durations, as
// Grafana does before sending a query. Other variables ($namespace, $pod)
// only appear inside label matcher strings, where they parse as text.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// TestDashboardQueriesPromtool wraps every dashboard expression as a
// recording rule and has promtool parse them.
func TestDashboardQueriesPromtool(t *testing.T) {
	qs := dashboardQueries(t, loadDashboard(t))
	if len(qs) == 0 {
		t.Fatal("no dashboard query")
	}
	rf := map[string]any{}
	var rules []map[string]string
	outsideStrings := regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	for i, q := range qs {
		expr := grafanaVars.Replace(q.expr)
		if strings.Contains(outsideStrings.ReplaceAllString(expr, `""`), "$") {
			t.Errorf("%s: a Grafana variable outside a label matcher string: %s", q.where, q.expr)
		}
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", i), "expr": expr})
	}
	rf["groups"] = []any{map[string]any{"name": "grafana-dashboard", "rules": rules}}
	y, err := yaml.Marshal(rf)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(file, y, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", file)
}

// TestDashboard checks the dashboard is importable (title, uid, schema,
// a Prometheus datasource variable every panel and target uses, unique
// panel ids, a 24-column grid without overlaps) and has the panels
// operators need.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 {
		t.Errorf("dashboard title %q uid %q schemaVersion %d: want a title, a uid and schemaVersion >= 30", d.Title, d.UID, d.SchemaVersion)
	}
	var dsVar bool
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			dsVar = true
		}
	}
	if !dsVar {
		t.Errorf("no datasource variable of type prometheus named datasource: the dashboard would be tied to one Grafana's datasource uid")
	}
	for _, v := range []string{"namespace", "pod"} {
		if !vars[v] {
			t.Errorf("no %s variable", v)
		}
	}
	wantDS := `{"type":"prometheus","uid":"${datasource}"}`
	ids := map[int]bool{}
	type rect struct{ x, y, w, h int }
	var cells []rect
	var exprs []string
	for _, p := range d.Panels {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or not unique", p.Title, p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for _, c := range cells {
			if g.X < c.x+c.w && c.x < g.X+g.W && g.Y < c.y+c.h && c.y < g.Y+g.H {
				t.Errorf("panel %q: gridPos %+v overlaps another panel", p.Title, g)
			}
		}
		cells = append(cells, rect{g.X, g.Y, g.W, g.H})
		if p.Type == "row" {
			continue
		}
		if compactJSON(t, p.Datasource) != wantDS {
			t.Errorf("panel %q: datasource %s, want %s", p.Title, p.Datasource, wantDS)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q missing or not unique", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if compactJSON(t, tg.Datasource) != wantDS {
				t.Errorf("panel %q target %s: datasource %s, want %s", p.Title, tg.RefID, tg.Datasource, wantDS)
			}
			if !strings.Contains(tg.Expr, `namespace=~"$namespace"`) || !strings.Contains(tg.Expr, `pod=~"$pod"`) {
				t.Errorf("panel %q target %s does not filter by $namespace and $pod: %s", p.Title, tg.RefID, tg.Expr)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, want := range []struct{ what, re string }{
		{"decisions by route, outcome and code", `sum by \(route, outcome, code\) \(rate\(supervaizer_sidecar_decisions_total`},
		{"token cache hit ratio", `token_cache_total\{[^}]*result="hit"[^}]*\}\[[^]]+\]\)\) / sum\(rate\(supervaizer_sidecar_token_cache_total`},
		{"verification latency", `histogram_quantile\(0\.99, sum by \(le\) \(rate\(supervaizer_sidecar_token_verify_duration_seconds_bucket`},
		{"JWKS staleness", `supervaizer_sidecar_jwks_seconds_since_last_good_refresh`},
		{"idempotency events", `sum by \(event\) \(rate\(supervaizer_sidecar_idempotency_events_total`},
		{"contract changes", `sum by \(kind\) \(increase\(supervaizer_sidecar_contract_changes_total`},
	} {
		re := regexp.MustCompile(want.re)
		if !slices.ContainsFunc(exprs, re.MatchString) {
			t.Errorf("no panel for %s (a query matching %s)", want.what, want.re)
		}
	}
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
