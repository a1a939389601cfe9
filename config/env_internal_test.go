package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// envLeeway is workspace_auth leeway's environment variable.
var envLeeway = Env("workspace_auth leeway")

// TestLeewaySetting: the config's leeway wins (absent: unset, 0: none); the environment variable is an
// integer of seconds as the SDK reads it; a fraction of a second is refused
// either way.
func TestLeewaySetting(t *testing.T) {
	cases := []struct {
		cfg     *time.Duration // nil: absent
		env     string
		want    time.Duration
		wantErr bool
	}{
		{nil, "", 30 * time.Second, false},
		{nil, "15", 15 * time.Second, false},
		{nil, " 15 ", 15 * time.Second, false},
		{nil, "0", 0, false},
		{nil, "1.5", 0, true},
		{nil, "-3", 0, true},
		{nil, "soon", 0, true},
		{new(20 * time.Second), "1.5", 20 * time.Second, false}, // the config wins, the env is not read
		{new(time.Duration(0)), "15", 0, false},                 // an explicit zero wins too
		{new(-time.Nanosecond), "", 0, true},
		{new(1500 * time.Millisecond), "", 0, true},
		{new(500 * time.Millisecond), "", 0, true},
	}
	for _, c := range cases {
		t.Setenv(envLeeway, c.env)
		var cfg *Duration
		if c.cfg != nil {
			cfg = new(Duration(*c.cfg))
		}
		got, err := leewaySetting(cfg)
		if (err != nil) != c.wantErr || (err == nil && got != c.want) {
			t.Errorf("cfg %v env %q: %v, %v; want %v (error %v)", c.cfg, c.env, got, err, c.want, c.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "leeway") && !strings.Contains(err.Error(), envLeeway) {
			t.Errorf("error %v does not name the setting", err)
		}
	}
}

// TestLeewayJSON: in the JSON config an absent leeway is the default 30 s
// and "leeway": 0 is no leeway (not the default).
func TestLeewayJSON(t *testing.T) {
	t.Setenv(envLeeway, "")
	for _, c := range []struct {
		json string
		want time.Duration
	}{{`{}`, 30 * time.Second}, {`{"leeway":0}`, 0}, {`{"leeway":"0s"}`, 0}, {`{"leeway":"10s"}`, 10 * time.Second}} {
		var wa WorkspaceAuth
		if err := json.Unmarshal([]byte(c.json), &wa); err != nil {
			t.Fatal(err)
		}
		if got, err := leewaySetting(wa.Leeway); err != nil || got != c.want {
			t.Errorf("%s: %v, %v; want %v", c.json, got, err, c.want)
		}
	}
}

// TestLeewayEnvMessages: $SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS out of
// range (an overflow included) is reported as out of range, not as "not a
// whole number"; a non-number as not a whole number.
func TestLeewayEnvMessages(t *testing.T) {
	for env, want := range map[string]string{
		"99999999999":          "must be between 0 and 300 seconds",
		"99999999999999999999": "must be between 0 and 300 seconds",
		"301":                  "must be between 0 and 300 seconds",
		"-3":                   "must be between 0 and 300 seconds",
		"1.5":                  "must be a whole number of seconds",
	} {
		t.Setenv(envLeeway, env)
		if _, err := leewaySetting(nil); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), envLeeway) {
			t.Errorf("%s=%s: %v, want %q", envLeeway, env, err, want)
		}
	}
}

// nopLog is a logger that drops everything.
func nopLog() *zap.Logger { return zap.NewNop() }
