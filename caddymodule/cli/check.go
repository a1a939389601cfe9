package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/supervaize/supervaizer-sidecar/caddymodule"
	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// `supervaizer check`: every supervaizer_auth handler of a config, built as
// start-up builds it (caddymodule.Handler.CheckProvision), plus the checks
// start-up tolerates (one JWKS fetch, one card read per agent).

// checkFetchTimeout bounds each fetch of check: the JWKS, an agent card.
const checkFetchTimeout = 5 * time.Second

func checkCobra() *cobra.Command {
	c := &cobra.Command{
		Use:   "check --config <Caddyfile> [--adapter caddyfile]",
		Short: "Checks every supervaizer_auth handler of a config and lists every problem",
		Args:  cobra.NoArgs,
	}
	c.Flags().StringP("config", "c", "", "Config file (- for stdin)")
	c.Flags().StringP("adapter", "a", "", "Config adapter: caddyfile (the default), or json (also: none) for a JSON config (the default for a .json file)")
	c.RunE = wrap(cmdCheck)
	return c
}

func cmdCheck(fs caddycmd.Flags, stdout, _ io.Writer) (int, error) {
	file := fs.String("config")
	if file == "" {
		return caddy.ExitCodeFailedStartup, errors.New("check: --config <file> is required")
	}
	cfgJSON, warnings, err := adaptConfig(file, fs.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("check: %w", err)
	}
	rep := checkConfig(cfgJSON)
	rep.notes = append(warnings, rep.notes...)
	rep.print(stdout)
	if n := rep.problemCount(); n > 0 {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("check: %s: %d problem(s)", file, n)
	}
	return 0, nil
}

// adaptConfig reads file ("-" for stdin) and adapts it to JSON. The adapter
// defaults to caddyfile, except for a .json file which is read as JSON;
// "json" and "none" (the word Caddy's own commands take) read it as JSON.
func adaptConfig(file, adapterName string) ([]byte, []string, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading config: %w", err)
	}
	if adapterName == "" && !strings.EqualFold(filepath.Ext(file), ".json") {
		adapterName = "caddyfile"
	}
	if adapterName == "" || adapterName == "json" || adapterName == "none" {
		if !json.Valid(data) {
			return nil, nil, errors.New("config is not valid JSON (use --adapter)")
		}
		return data, nil, nil
	}
	adapter := caddyconfig.GetAdapter(adapterName)
	if adapter == nil {
		return nil, nil, fmt.Errorf("unrecognized config adapter %q", adapterName)
	}
	out, warns, err := adapter.Adapt(data, map[string]any{"filename": file})
	if err != nil {
		return nil, nil, fmt.Errorf("adapting config with %s: %w", adapterName, err)
	}
	var notes []string
	for _, w := range warns {
		notes = append(notes, "config warning: "+w.String())
	}
	return out, notes, nil
}

// checkReport is the result of check: per handler, its problems and the
// warnings start-up would log; then notes about the whole config.
type checkReport struct {
	handlers []handlerReport
	problems []string // problems of the config as a whole
	warnings []string // Caddy settings that put the gate at risk (caddymodule.CaddyConfigWarnings)
	notes    []string
}

type handlerReport struct {
	label    string
	problems []string
	warnings []string
	settings []config.Setting // effective settings after environment resolution (startup.go)
}

func (r *checkReport) problemCount() int {
	n := len(r.problems)
	for _, h := range r.handlers {
		n += len(h.problems)
	}
	return n
}

func (r *checkReport) print(w io.Writer) {
	for _, n := range r.notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, p := range r.problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	for _, wn := range r.warnings {
		fmt.Fprintf(w, "warning: %s\n", wn)
	}
	for _, h := range r.handlers {
		fmt.Fprintf(w, "%s:\n", h.label)
		if len(h.settings) > 0 {
			fmt.Fprintln(w, "  effective settings (secrets as fingerprints, URLs redacted):")
		}
		for _, s := range h.settings {
			fmt.Fprintf(w, "    %-26s %s  [%s]\n", s.Name, s.Value, s.Source)
		}
		for _, p := range h.problems {
			fmt.Fprintf(w, "  problem: %s\n", p)
		}
		for _, wn := range h.warnings {
			fmt.Fprintf(w, "  warning: %s\n", wn)
		}
		if len(h.problems) == 0 {
			fmt.Fprintln(w, "  ok")
		}
	}
	if n := r.problemCount(); n > 0 {
		fmt.Fprintf(w, "FAILED: %d problem(s)\n", n)
	} else {
		fmt.Fprintln(w, "OK")
	}
}

// checkConfig checks every http.handlers.supervaizer_auth handler of an
// adapted JSON config, and Caddy's own admin and autosave settings (the
// "admin" section, caddyConfigWarnings).
func checkConfig(cfgJSON []byte) *checkReport {
	rep := &checkReport{}
	var tree any
	if err := json.Unmarshal(cfgJSON, &tree); err != nil {
		rep.problems = append(rep.problems, "config is not valid JSON: "+err.Error())
		return rep
	}
	var top struct {
		Admin *caddy.AdminConfig `json:"admin"`
	}
	if err := json.Unmarshal(cfgJSON, &top); err != nil {
		rep.problems = append(rep.problems, "config admin section does not decode: "+err.Error())
	}
	rep.warnings = caddymodule.CaddyConfigWarnings(top.Admin)
	var found []foundHandler
	findHandlers(tree, "", "", nil, &found)
	if len(found) == 0 {
		rep.problems = append(rep.problems, "no supervaizer_auth handler in the config")
	}
	dups := duplicateKeyProblems(cfgJSON) // duplicates.go
	for i, f := range found {
		hr := handlerReport{label: f.label(i + 1)}
		hr.problems, hr.warnings, hr.settings = checkHandler(f.raw)
		if p, ok := dups[f.path]; ok {
			hr.problems = append([]string{p}, hr.problems...)
		}
		rep.handlers = append(rep.handlers, hr)
	}
	return rep
}

// foundHandler is one supervaizer_auth handler object of the config.
type foundHandler struct {
	path   string
	server string
	hosts  []string
	raw    map[string]any
}

func (f foundHandler) label(n int) string {
	var where []string
	if f.server != "" {
		where = append(where, "server "+f.server)
	}
	if len(f.hosts) > 0 {
		where = append(where, "host "+strings.Join(f.hosts, ", "))
	}
	s := "supervaizer_auth #" + strconv.Itoa(n)
	if len(where) > 0 {
		s += " (" + strings.Join(where, "; ") + ")"
	}
	return s + " at " + f.path
}

// findHandlers walks the whole config (routes, subroutes, error routes,
// named routes, ...) for handler objects {"handler":"supervaizer_auth",...},
// noting the HTTP server and the host matchers of the enclosing routes.
func findHandlers(v any, path, server string, hosts []string, out *[]foundHandler) {
	switch v := v.(type) {
	case map[string]any:
		if name, _ := v["handler"].(string); name == "supervaizer_auth" {
			*out = append(*out, foundHandler{path: path, server: server, hosts: hosts, raw: v})
			return
		}
		if matchers, ok := v["match"].([]any); ok {
			hosts = slices.Clone(hosts)
			for _, m := range matchers {
				mm, _ := m.(map[string]any)
				hl, _ := mm["host"].([]any)
				for _, h := range hl {
					if s, ok := h.(string); ok {
						hosts = append(hosts, s)
					}
				}
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			srv := server
			if path == "apps.http.servers" {
				srv = k
			}
			p := k
			if path != "" {
				p = path + "." + k
			}
			findHandlers(v[k], p, srv, hosts, out)
		}
	case []any:
		for i, e := range v {
			findHandlers(e, path+"["+strconv.Itoa(i)+"]", server, hosts, out)
		}
	}
}

// checkHandler unmarshals one handler as Caddy would and returns its
// problems, the warnings its provisioning logs and its effective settings.
func checkHandler(raw map[string]any) (problems, warnings []string, settings []config.Setting) {
	body := make(map[string]any, len(raw))
	for k, v := range raw {
		if k != "handler" {
			body[k] = v
		}
	}
	b, _ := json.Marshal(body)
	var h caddymodule.Handler
	if err := caddy.StrictUnmarshalJSON(b, &h); err != nil {
		return []string{"config does not decode: " + err.Error()}, nil, nil
	}
	problems, warnings, settings = provisionProblems(&h)

	// Checks start-up does not make: it starts with the JWKS down and waits.
	if u := h.ResolvedJWKSURL(); u != "" {
		p, w := checkJWKS(u)
		problems, warnings = append(problems, p...), append(warnings, w...)
	}
	problems = append(problems, checkRegistration(&h)...)
	return problems, warnings, settings
}

// provisionProblems builds h exactly as Provision does (the same steps and
// rules, every problem at once: Handler.Validate's static checks, then
// Handler.CheckProvision) with a logger that records warnings instead of
// printing them. Lines of the background JWKS and card refreshes are left
// out: whether they ran before the close is chance, and check fetches both
// itself.
func provisionProblems(h *caddymodule.Handler) (problems, warnings []string, settings []config.Setting) {
	core, logs := observer.New(zapcore.WarnLevel)
	settings, err := h.CheckProvision(zap.New(core))
	if err != nil {
		var joined interface{ Unwrap() []error }
		list := []error{err}
		if errors.As(err, &joined) {
			list = joined.Unwrap()
		}
		for _, e := range list {
			problems = append(problems, strings.TrimPrefix(e.Error(), "supervaizer_auth: "))
		}
	}
	for _, e := range logs.All() {
		if e.LoggerName == "registration" || strings.Contains(e.Message, "JWKS fetch failed") {
			continue
		}
		warnings = append(warnings, e.Message)
	}
	return problems, warnings, settings
}

// checkJWKS fetches url once, as the verifier's JWKS source does, and
// reports what that source would not accept (grants.FetchJWKS: the
// verifier's own document rule) as problems: unreachable, not 200, not a
// JWKS, no usable Ed25519 key with a kid. The kids of the keys it skips
// (tokens naming one fail invalid_jwk) are warnings.
func checkJWKS(url string) (problems, warnings []string) {
	ctx, cancel := context.WithTimeout(context.Background(), checkFetchTimeout)
	defer cancel()
	prefix := "workspace_auth jwks_url " + redact.URL(url) + ": "
	keys, err := grants.FetchJWKS(ctx, &http.Client{Timeout: checkFetchTimeout}, url)
	for _, kid := range keys.Unusable {
		warnings = append(warnings, fmt.Sprintf("%skey %q is not a usable Ed25519 verification key: tokens naming it fail", prefix, kid))
	}
	switch grants.JWKSFetchErrorReason(err) {
	case "":
		return nil, warnings
	case "no_usable_key":
		return []string{prefix + "no usable Ed25519 (OKP) key with a kid: no token can verify"}, warnings
	case "invalid_document":
		return []string{prefix + "not a valid JWKS: " + err.Error()}, warnings
	}
	return []string{prefix + "unreachable: " + redact.URLsIn(err.Error())}, warnings
}

// checkRegistration reads, once and with a 5 s timeout, the card (or file)
// of every configured agent slug from the contract source Provision would
// use (caddymodule.Handler.RegistrationSource), and reports what start-up
// tolerates and retries in the background: an unreachable or unreadable
// card, a card for another slug, version pins that are not accepted. A
// source Provision refuses is left to Provision.
func checkRegistration(h *caddymodule.Handler) []string {
	s, from := h.RegistrationSource(zap.NewNop())
	if s == nil {
		return nil
	}
	defer s.Close()
	slugs := make([]string, 0, len(h.Agents))
	for slug := range h.Agents {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	var problems []string
	for _, slug := range slugs {
		ctx, cancel := context.WithTimeout(context.Background(), checkFetchTimeout)
		if err := s.Refresh(ctx, slug); err != nil {
			problems = append(problems, fmt.Sprintf("agent %s: card from %s: %s", slug, from, redact.URLsIn(err.Error())))
		}
		cancel()
	}
	return problems
}
