package caddymodule

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"github.com/supervaize/supervaizer-sidecar/config"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// placeholderDoors load one supervaizer_auth body, written as Caddyfile
// lines or as the JSON members of the same handler, into a Handler as
// Caddy would decode it.
var placeholderDoors = map[string]func(t *testing.T, caddyfile, json string) *Handler{
	"caddyfile": placeholderCaddyfileHandler, "json": placeholderJSONHandler,
}

func placeholderCaddyfileHandler(t *testing.T, body, _ string) *Handler {
	t.Helper()
	cf := ":8080 {\nsupervaizer_auth {\n" + body + "\n}\nreverse_proxy 127.0.0.1:9\n}\n"
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	var cfg any
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		t.Fatal(err)
	}
	handler := findHandler(cfg)
	delete(handler, "handler")
	raw, _ := json.Marshal(handler)
	return placeholderJSONHandler(t, "", string(raw))
}

func placeholderJSONHandler(t *testing.T, _, raw string) *Handler {
	t.Helper()
	var h Handler
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return &h
}

// placeholderFile writes content to a new file and returns its path.
func placeholderFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// jsonString is s as a JSON string literal.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestPlaceholderSettingsExpanded: from both doors, {env.*} in api_key,
// server_id and issuer and {file.*} in a key and in public_key are
// expanded before the gate is built: the effective settings show the
// values (the keys as fingerprints), a token for the expanded server and
// issuer is accepted with the expanded key, and the placeholder's text
// sent as the key (the F1 attack) is 401 with nothing reaching the agent.
func TestPlaceholderSettingsExpanded(t *testing.T) {
	clearSupervaizerEnv(t)
	const writeKey, readKey, sid, iss = "real-write-key-0123", "real-read-key-4567", "srv-ph-1", "https://studio.ph"
	t.Setenv("PHT_KEY", writeKey)
	t.Setenv("PHT_SID", sid)
	t.Setenv("PHT_ISS", iss)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(pub)
	pemPath := placeholderFile(t, "studio.pub", string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))
	keyPath := placeholderFile(t, "read.key", readKey+"\n")
	caddyfile := "api_key {env.PHT_KEY} write\napi_key {file." + keyPath + "} read\nserver_id {env.PHT_SID}\n" +
		"agent " + benchAgent + " " + benchAgentID + "\nregistration off\nidempotency off\n" +
		"workspace_auth {\nrequired on\nissuer {env.PHT_ISS}\npublic_key {file." + pemPath + "}\n}"
	jsonCfg := `{"api_keys": [{"key": "{env.PHT_KEY}", "scope": "write"}, {"key": ` + jsonString("{file."+keyPath+"}") + `, "scope": "read"}],
		"server_id": "{env.PHT_SID}", "agents": {"` + benchAgent + `": "` + benchAgentID + `"},
		"registration": {"source": "off"}, "idempotency": {"store": "off"},
		"workspace_auth": {"required": true, "issuer": "{env.PHT_ISS}", "public_key": ` + jsonString("{file."+pemPath+"}") + `}}`
	for door, load := range placeholderDoors {
		h := load(t, caddyfile, jsonCfg)
		g, err := h.build(zap.NewNop(), nil, pools{})
		if err != nil {
			t.Fatalf("%s: build: %v", door, err)
		}
		h.g = g
		t.Cleanup(g.Close)
		settings := map[string]string{}
		for _, s := range h.effective {
			settings[s.Name] += s.Value + ";"
		}
		for name, want := range map[string]string{
			"server_id": sid + ";", "workspace_auth issuer": iss + ";",
			"api_key": fingerprint(writeKey) + " write;" + fingerprint(readKey) + " read;",
		} {
			if settings[name] != want {
				t.Errorf("%s: effective %s = %q, want %q", door, name, settings[name], want)
			}
		}
		token := placeholderToken(t, priv, iss, sid)
		for _, c := range []struct {
			key  string
			want int
		}{{writeKey, http.StatusOK}, {"{env.PHT_KEY}", http.StatusUnauthorized}, {"{file." + keyPath + "}", http.StatusUnauthorized}} {
			r, _ := jobSyncRequest(context.Background(), token)
			r.Header.Set("X-Api-Key", c.key)
			w := httptest.NewRecorder()
			reached := false
			err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
				reached = true
				w.WriteHeader(http.StatusOK)
				return nil
			}))
			if err != nil || w.Code != c.want || reached != (c.want == http.StatusOK) {
				t.Errorf("%s: X-API-Key %q: %d (err %v), agent reached %v; want %d: %s", door, c.key, w.Code, err, reached, c.want, w.Body)
			}
		}
	}
}

// placeholderToken is a job.sync token of the fixture agent for the server
// sid, issued by iss and signed with priv.
func placeholderToken(t *testing.T, priv ed25519.PrivateKey, iss, sid string) string {
	t.Helper()
	now := time.Now().Unix()
	s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": iss, "aud": grants.AudiencePrefix + sid, "sub": "workspace-agent-grant:grant-1",
		"grant_id": "grant-1", "workspace_id": "workspace_123", "workspace_slug": "acme",
		"agent_id": benchAgentID, "agent_slug": benchAgent, "server_id": sid,
		"scopes": []any{"supervaizer/action.invoke", "job.sync"}, "iat": now, "exp": now + 600, "jti": "jti-ph",
	}).SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPlaceholderSettingsUnsetRefused: a setting whose {env.*} is unset
// expands to "" and is refused from both doors, named: api_key, server_id
// (even with $SUPERVAIZER_SERVER_ID set, which a setting left out would
// fall back to), issuer, and an optional one (upstream).
func TestPlaceholderSettingsUnsetRefused(t *testing.T) {
	clearSupervaizerEnv(t)
	os.Unsetenv("PHT_UNSET")
	t.Setenv("SUPERVAIZER_SERVER_ID", "srv-from-env")
	pemPath := placeholderFile(t, "studio.pub", testPEM(t))
	base := map[string]string{"api_key": "api_key k", "server_id": "server_id srv-ph-1", "issuer": "issuer https://studio.ph"}
	baseJSON := map[string]string{"api_key": `"api_keys": [{"key": "k"}]`, "server_id": `"server_id": "srv-ph-1"`, "issuer": `"issuer": "https://studio.ph"`}
	const empty = ": a placeholder in it expands to an empty value"
	for _, c := range []struct{ setting, line, json, want string }{
		{"api_key", "api_key {env.PHT_UNSET}", `"api_keys": [{"key": "{env.PHT_UNSET}"}]`, "api_key 1" + empty},
		{"server_id", "server_id {env.PHT_UNSET}", `"server_id": "{env.PHT_UNSET}"`, "server_id" + empty},
		{"issuer", "issuer {env.PHT_UNSET}", `"issuer": "{env.PHT_UNSET}"`, "workspace_auth issuer" + empty},
		{"api_key", "api_key k\nupstream {env.PHT_UNSET}", `"api_keys": [{"key": "k"}], "upstream": "{env.PHT_UNSET}"`, "upstream" + empty},
	} {
		lines, members := map[string]string{c.setting: c.line}, map[string]string{c.setting: c.json}
		for k, v := range base {
			if _, ok := lines[k]; !ok {
				lines[k], members[k] = v, baseJSON[k]
			}
		}
		caddyfile := lines["api_key"] + "\n" + lines["server_id"] + "\nagent a A\nregistration off\nidempotency off\n" +
			"workspace_auth {\nrequired on\n" + lines["issuer"] + "\npublic_key " + pemPath + "\n}"
		jsonCfg := `{` + members["api_key"] + `, ` + members["server_id"] + `, "agents": {"a": "A"}, "registration": {"source": "off"},
			"idempotency": {"store": "off"}, "workspace_auth": {"required": true, ` + members["issuer"] + `, "public_key": ` + jsonString(pemPath) + `}}`
		for door, load := range placeholderDoors {
			_, err := load(t, caddyfile, jsonCfg).CheckProvision(zap.NewNop())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %s: %v, want refused with %q", door, c.setting, err, c.want)
			}
		}
	}
}

// TestPlaceholderSettingsUnknownRefused: a placeholder the start-up
// replacer does not know (a request's) is refused from both doors, naming
// its setting and the placeholder, the introspection block's included; a
// secret's error shows neither the secret nor braces that may be part of it.
func TestPlaceholderSettingsUnknownRefused(t *testing.T) {
	clearSupervaizerEnv(t)
	pemPath := placeholderFile(t, "studio.pub", testPEM(t))
	const tail = "is not a placeholder known at start-up; use {env.NAME}, {file.PATH} or the Caddyfile's {$NAME}"
	for _, c := range []struct{ line, json, want string }{
		{"api_key {http.request.header.X-Key} write", `"api_keys": [{"key": "{http.request.header.X-Key}"}]`,
			"api_key 1: {http.request.header.X-Key} " + tail},
		{"server_id {http.request.host}", `"server_id": "{http.request.host}"`, "server_id: {http.request.host} " + tail},
		{"upstream http://{http.request.host}:8000", `"upstream": "http://{http.request.host}:8000"`, "upstream: {http.request.host} " + tail},
		{"agent a {http.vars.agent}", `"agents": {"a": "{http.vars.agent}"}`, "agent a id: {http.vars.agent} " + tail},
		{"workspace_auth {\nrequired on\nissuer {http.vars.iss}\npublic_key " + pemPath + "\n}",
			`"workspace_auth": {"required": true, "issuer": "{http.vars.iss}", "public_key": ` + jsonString(pemPath) + `}`,
			"workspace_auth issuer: {http.vars.iss} " + tail},
		{"workspace_auth {\nrequired on\nissuer https://studio.ph\npublic_key " + pemPath + "\nintrospection {\nurl https://studio.ph/i\nclient_id c\nclient_secret {http.vars.s}\n}\n}",
			`"workspace_auth": {"required": true, "issuer": "https://studio.ph", "public_key": ` + jsonString(pemPath) +
				`, "introspection": {"url": "https://studio.ph/i", "client_id": "c", "client_secret": "{http.vars.s}"}}`,
			"workspace_auth introspection client_secret: {http.vars.s} " + tail},
		{"api_key abc{secretpart}def write", `"api_keys": [{"key": "abc{secretpart}def"}]`,
			"api_key 1: holds a placeholder not known at start-up"},
		// F6: a dotted name in braces is no less part of the secret.
		{"api_key abc{secret.part}def write", `"api_keys": [{"key": "abc{secret.part}def"}]`,
			"api_key 1: holds a placeholder not known at start-up"},
		{"workspace_auth {\nrequired on\nissuer https://studio.ph\npublic_key " + pemPath + "\nintrospection {\nurl https://studio.ph/i\nclient_id c\nclient_secret x{secretpart.y}\n}\n}",
			`"workspace_auth": {"required": true, "issuer": "https://studio.ph", "public_key": ` + jsonString(pemPath) +
				`, "introspection": {"url": "https://studio.ph/i", "client_id": "c", "client_secret": "x{secretpart.y}"}}`,
			"workspace_auth introspection client_secret: holds a placeholder not known at start-up"},
	} {
		checkPlaceholderRefused(t, c.line, c.json, c.want, "secretpart")
	}
}

// checkPlaceholderRefused provisions, from both doors, a handler whose
// body is line (Caddyfile) or json (members), over a base that line's
// directive or json's members replace, and fails unless it is refused
// with want and without any of hidden in the error.
func checkPlaceholderRefused(t *testing.T, line, json, want string, hidden ...string) {
	t.Helper()
	caddyfile := line
	for _, base := range []string{"server_id srv-ph-1", "api_key base-key", "agent b B", "registration off", "idempotency off"} {
		if !strings.Contains("\n"+line, "\n"+strings.Fields(base)[0]+" ") { // the case's line replaces the base's
			caddyfile += "\n" + base
		}
	}
	jsonCfg := `{"server_id": "srv-ph-1", "api_keys": [{"key": "base-key"}], "agents": {"b": "B"}, "registration": {"source": "off"}, "idempotency": {"store": "off"}, ` + json + `}`
	jsonCfg = string(fixBaseKeys([]byte(jsonCfg)))
	for door, load := range placeholderDoors {
		_, err := load(t, caddyfile, jsonCfg).CheckProvision(zap.NewNop())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s %q: %v, want refused with %q", door, line, err, want)
			continue
		}
		for _, h := range hidden {
			if strings.Contains(err.Error(), h) {
				t.Errorf("%s %q: the error shows %q: %v", door, line, h, err)
			}
		}
	}
}

// TestPlaceholderSettingsEmptyAmongTextRefused (F2): a placeholder that
// expands to an empty value is refused from both doors even when the
// setting holds other text, naming the setting, and the placeholder only
// for a setting that is not a secret; a secret's error shows no text of
// it (neither the value of a placeholder that is set nor a name).
func TestPlaceholderSettingsEmptyAmongTextRefused(t *testing.T) {
	clearSupervaizerEnv(t)
	os.Unsetenv("PHT_UNSET")
	t.Setenv("PHT_SET", "half-of-the-key")
	emptyFile := placeholderFile(t, "empty.key", "\n")
	const empty = ": a placeholder in it expands to an empty value"
	for _, c := range []struct {
		line, json, want string
		hidden           []string
	}{
		{"api_key {env.PHT_SET}{env.PHT_UNSET} write", `"api_keys": [{"key": "{env.PHT_SET}{env.PHT_UNSET}"}]`,
			"api_key 1" + empty, []string{"half-of-the-key", "PHT_"}},
		{"api_key abc{file." + emptyFile + "} write", `"api_keys": [{"key": ` + jsonString("abc{file."+emptyFile+"}") + `}]`,
			"api_key 1" + empty, []string{"abc", emptyFile}},
		{"server_id srv-{env.PHT_UNSET}", `"server_id": "srv-{env.PHT_UNSET}"`,
			"server_id" + empty + ": {env.PHT_UNSET}", nil},
		{"upstream http://{env.PHT_UNSET}:8000", `"upstream": "http://{env.PHT_UNSET}:8000"`,
			"upstream" + empty + ": {env.PHT_UNSET}", nil},
		{"idempotency {\nstore redis\nredis_url redis://:{env.PHT_UNSET}@redis.ph:6379/0\n}",
			`"idempotency": {"store": "redis", "redis_url": "redis://:{env.PHT_UNSET}@redis.ph:6379/0"}`,
			"idempotency redis_url" + empty, []string{"redis.ph", "PHT_"}},
		{"agent b {env.PHT_SET}-{env.PHT_UNSET}", `"agents": {"b": "{env.PHT_SET}-{env.PHT_UNSET}"}`,
			"agent b id" + empty + ": {env.PHT_UNSET}", nil},
	} {
		checkPlaceholderRefused(t, c.line, c.json, c.want, c.hidden...)
	}
}

// TestPlaceholderSettingsExpandedOnce: a value an {env.*} expands to is
// taken as it is, even when it looks like a placeholder, and a second
// build does not expand it again.
func TestPlaceholderSettingsExpandedOnce(t *testing.T) {
	clearSupervaizerEnv(t)
	t.Setenv("PHT_LITERAL", "{env.PHT_OTHER}")
	t.Setenv("PHT_OTHER", "other-server")
	h := &Handler{Config: config.Config{ServerID: "{env.PHT_LITERAL}", APIKeys: []config.APIKey{{Key: "k"}}, LocalMode: new(true),
		Registration: &config.RegistrationConfig{Source: "off"}, Idempotency: &config.IdempotencyConfig{Store: "off"}}}
	for range 2 {
		g, err := h.build(zap.NewNop(), nil, pools{})
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		var got string
		for _, st := range h.effective {
			if st.Name == "server_id" {
				got = st.Value
			}
		}
		if got != "{env.PHT_OTHER}" {
			t.Fatalf("server_id %q in effect, want the variable's value as it is", got)
		}
	}
}

// TestPlaceholderSettingsEveryStringField: every string setting of the
// handler and its blocks (found by reflection, so that a new field is
// covered or this fails) is expanded.
func TestPlaceholderSettingsEveryStringField(t *testing.T) {
	t.Setenv("PHT_EVERY", "x")
	h := &Handler{}
	fillStrings(reflect.ValueOf(h).Elem(), "{env.PHT_EVERY}")
	if errs := h.expandPlaceholders(); len(errs) > 0 {
		t.Fatal(errs)
	}
	var left []string
	walkStrings(reflect.ValueOf(h).Elem(), "handler", func(path, v string) {
		if v != "x" {
			left = append(left, path+"="+v)
		}
	})
	if len(left) > 0 {
		t.Fatalf("settings not expanded: %v", left)
	}
}

// fillStrings sets every exported string of v (through pointers to
// structs, slices of strings or structs, and string maps) to s.
func fillStrings(v reflect.Value, s string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.New(v.Type().Elem()))
			fillStrings(v.Elem(), s)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillStrings(v.Field(i), s)
			}
		}
	case reflect.Slice:
		if k := v.Type().Elem().Kind(); k == reflect.String || k == reflect.Struct {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			fillStrings(v.Index(0), s)
		}
	case reflect.Map:
		if v.Type().Key().Kind() == reflect.String && v.Type().Elem().Kind() == reflect.String {
			v.Set(reflect.ValueOf(map[string]string{s: s}).Convert(v.Type()))
		}
	}
}

// walkStrings calls f with every exported string of v (as fillStrings
// reaches them, map keys included) and its path.
func walkStrings(v reflect.Value, path string, f func(path, v string)) {
	switch v.Kind() {
	case reflect.String:
		f(path, v.String())
	case reflect.Pointer:
		if !v.IsNil() {
			walkStrings(v.Elem(), path, f)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if sf := v.Type().Field(i); sf.IsExported() {
				walkStrings(v.Field(i), path+"."+sf.Name, f)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			walkStrings(v.Index(i), path+"["+strconv.Itoa(i)+"]", f)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			walkStrings(k, path+" key", f)
			walkStrings(v.MapIndex(k), path+"["+k.String()+"]", f)
		}
	}
}

// TestPlaceholderSettingsDollarVarReadAgain pins what the README says of
// the Caddyfile's {$NAME}: its value becomes Caddyfile text, so braces in
// it are placeholders to the handler's expansion and \{ a literal brace,
// whereas the value of {env.NAME} is taken as it is.
func TestPlaceholderSettingsDollarVarReadAgain(t *testing.T) {
	clearSupervaizerEnv(t)
	t.Setenv("PHT_INDIRECT", "{env.PHT_TARGET}")
	t.Setenv("PHT_TARGET", "srv-target")
	t.Setenv("PHT_ESCAPED", `srv\{x\}`)
	for value, want := range map[string]string{
		"{$PHT_INDIRECT}": "srv-target", "{env.PHT_INDIRECT}": "{env.PHT_TARGET}",
		"{$PHT_ESCAPED}": "srv{x}", "{env.PHT_ESCAPED}": `srv\{x\}`,
	} {
		h := placeholderCaddyfileHandler(t, "server_id "+value+"\napi_key k", "")
		if errs := h.expandPlaceholders(); len(errs) > 0 {
			t.Fatalf("%s: %v", value, errs)
		}
		if h.ServerID != want {
			t.Errorf("server_id %s = %q, want %q", value, h.ServerID, want)
		}
	}
}
