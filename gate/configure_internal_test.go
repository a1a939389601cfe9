package gate

import (
	"testing"

	"github.com/supervaize/supervaizer-sidecar/config"
)

// TestDefaultBodyMemory: the process's default body budget is the one the
// configuration states and validates against (config.DefaultBodyMemory).
func TestDefaultBodyMemory(t *testing.T) {
	if DefaultBodyMemory != config.DefaultBodyMemory {
		t.Fatalf("gate's default body memory %d, the configuration's %d", DefaultBodyMemory, config.DefaultBodyMemory)
	}
}
