package gate

import (
	"slices"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/limits"
)

// TestSettingBoundsListed: every bounded value of a config has a bound, and
// every bound is checked.
func TestSettingBoundsListed(t *testing.T) {
	c := Config{Auth: AuthConfig{Leeway: new(time.Duration(0)), Introspection: &IntrospectionConfig{}},
		Idempotency: &IdempotencyConfig{}, Limits: &limits.Config{}}
	var names []string
	for _, bv := range c.boundedValues() {
		if _, ok := settingBounds[bv.name]; !ok {
			t.Errorf("%s has no bound", bv.name)
		}
		names = append(names, bv.name)
	}
	for name := range settingBounds {
		if !slices.Contains(names, name) {
			t.Errorf("bound %s is never checked", name)
		}
	}
}
