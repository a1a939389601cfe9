package caddymodule

import (
	"os"
	"strings"
	"testing"
)

// clearSupervaizerEnv unsets every SUPERVAIZER_* variable for the test:
// build reads them when a setting is not in the config.
func clearSupervaizerEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SUPERVAIZER_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
}
