package pattern

import "testing"

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, target string
		want            bool
	}{
		{"job.start", "job.start", true},
		{"job.start", "job.stop", false},
		{"job.start", "job.start.x", false},
		{"dataset.*.query", "dataset.sales.query", true},
		{"dataset.*.query", "dataset.query", false},
		{"dataset.*.query", "dataset.a.b.query", false},
		{"resource.*.import", "resource.leads.import", true},
		{"*", "job", true},
		{"*", "job.start", false},
		{"*", "", false},
		{"job.*", "job.", false},
		{"job.start", "surface:job.start", false},
		{"*.start", "surface:job.start", false},
		{"*", "surface:job", false},
		{"surface:job.start", "surface:job.start", true},
		{"surface:job.start", "job.start", false},
		{"surface:*", "surface:home", true},
		{"surface:*", "surface:home.tab", false},
		{"surface:*", "home", false},
	} {
		p, err := Parse(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Match(c.target); got != c.want {
			t.Errorf("%q.Match(%q) = %v, want %v", c.pattern, c.target, got, c.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, p := range []string{"", "job.", ".start", "job..start", "job.st*", "**",
		"job.start ", " job.start", "job .start", "job.start\t", "+job", "job/start", "surface:", ":job", "a:b:c", "sur face:job", "jób"} {
		if _, err := Parse(p); err == nil {
			t.Errorf("Parse(%q) accepted", p)
		}
	}
}

func TestSet(t *testing.T) {
	s, err := ParseSet([]string{"job.start", "dataset.*.query"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Match("dataset.x.query") || !s.Match("job.start") || s.Match("job.stop") {
		t.Error("Set.Match is not the union of its patterns")
	}
}
