// Package helm_test checks the chart's files that need no Helm and no API
// server; test/kube lints, renders and installs the chart (docs/kubernetes.md).
package helm_test

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestChartAlertRulesEqualObservability: the chart's PrometheusRule embeds
// files/alerts.rules.yml, a copy of deploy/observability/alerts.rules.yml
// (Helm reads no file outside the chart); the two stay equal.
func TestChartAlertRulesEqualObservability(t *testing.T) {
	chart, err := os.ReadFile("supervaizer-sidecar/files/alerts.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := os.ReadFile("../observability/alerts.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chart, obs) {
		t.Fatal("deploy/helm/supervaizer-sidecar/files/alerts.rules.yml differs from deploy/observability/alerts.rules.yml: copy it again")
	}
}

var valuesKey = regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):`)

// TestChartValuesDocumented: every field of values.yaml has a comment line
// right above it, but the fields inside a standard Kubernetes value
// (resources).
func TestChartValuesDocumented(t *testing.T) {
	src, err := os.ReadFile("supervaizer-sidecar/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		indent int
		name   string
	}
	var stack []key
	prev := ""
	n := 0
	for i, line := range strings.Split(string(src), "\n") {
		m := valuesKey.FindStringSubmatch(line)
		if m == nil {
			if strings.TrimSpace(line) != "" {
				prev = line
			}
			continue
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		exempt := false
		for _, k := range stack {
			exempt = exempt || k.name == "resources"
		}
		stack = append(stack, key{indent, m[2]})
		if !exempt {
			n++
			if !strings.HasPrefix(strings.TrimSpace(prev), "#") {
				t.Errorf("values.yaml:%d: %s has no comment above it", i+1, m[2])
			}
		}
		prev = line
	}
	if n < 20 {
		t.Fatalf("only %d fields found: the parser no longer reads values.yaml", n)
	}
}
