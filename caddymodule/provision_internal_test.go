package caddymodule

import (
	"github.com/supervaize/supervaizer-sidecar/config"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestValidate: the static checks refuse bad enum values and negative body
// bounds, each naming its setting, and accept the zero Handler; build
// reports them with the problems that need the environment.
func TestValidate(t *testing.T) {
	if err := (&Handler{}).Validate(); err != nil {
		t.Fatalf("zero handler: %v", err)
	}
	good := Handler{Config: config.Config{LegacyRoutes: "deny", AuditLog: "all", OtherRoutes: "public", MaxBody: 1}}
	if err := good.Validate(); err != nil {
		t.Fatalf("good handler: %v", err)
	}
	bad := Handler{Config: config.Config{LegacyRoutes: "maybe", AuditLog: "some", OtherRoutes: "open", MaxBody: -1, MaxBodyA2A: -1, MaxBodyData: -1}}
	err := bad.Validate()
	for _, want := range []string{`legacy_routes must be allow or deny, not "maybe"`, `audit_log must be all or deny, not "some"`,
		`other_routes must be deny, api_key or public, not "open"`, "max_body must not be negative", "max_body_a2a must not be negative",
		"max_body_data must not be negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
	clearSupervaizerEnv(t)
	if _, err := bad.build(zap.NewNop(), nil, pools{}); err == nil || !strings.Contains(err.Error(), "legacy_routes") ||
		!strings.Contains(err.Error(), "no API key") {
		t.Errorf("build: %v, want the static and the environment problems at once", err)
	}
}
