package gate

import (
	"testing"

	"github.com/supervaize/supervaizer-sidecar/pattern"
)

func TestIntrospectionPatterns(t *testing.T) {
	set, err := pattern.ParseSet(DefaultIntrospectedTargets)
	if err != nil {
		t.Fatal(err)
	}
	in := &Introspector{patterns: set}
	for target, want := range map[string]bool{
		"job.start": true, "job.sync": false, "job.start.form": false, "job": false,
		"resource.contacts.create": true, "resource.contacts.list": false, "resource.contacts.import": true,
		"resource..create": false, "resource.a.b.create": false, "dataset.leads.query": true,
		"artifact.get": true, "artifact.list": false, "": false, "job.start.": false,
	} {
		if got := in.covers(target); got != want {
			t.Errorf("covers(%q) = %v, want %v", target, got, want)
		}
	}
}
