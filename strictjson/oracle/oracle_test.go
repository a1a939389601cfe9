package oracle

import "testing"

func TestRead(t *testing.T) {
	cases := []struct {
		in       string
		depth    int
		dup      bool
		isObject bool
		lone     bool
	}{
		{`{}`, 1, false, true, false},
		{`[]`, 1, false, false, false},
		{`1`, 0, false, false, false},
		{`{"a":{"a":1},"b":[{"a":1},{"a":2}]}`, 3, false, true, false},
		{`{"a":{"b":1,"b":2}}`, 2, true, true, false},
		{`{"a":1,"\u0061":2}`, 1, true, true, false},
		{`{"a":"a","b":"a"}`, 1, false, true, false},
		{`{"a":[],"a":[]}`, 2, true, true, false},
		{`[{"k":"k"},{"k":"v","v":"k"}]`, 2, false, false, false},
		{`["\ud800"]`, 1, false, false, true},
		{`["\\ud800"]`, 1, false, false, false},
		{`["\ud83d\ude00", "\udc00"]`, 1, false, false, true},
	}
	for _, c := range cases {
		f := Read([]byte(c.in))
		if !f.Valid || f.Depth != c.depth || f.Dup != c.dup || f.IsObject != c.isObject || f.Lone != c.lone {
			t.Errorf("%s: %+v", c.in, f)
		}
	}
	for _, in := range []string{`{`, `{} {}`, "\xff", `NaN`, ``} {
		if f := Read([]byte(in)); f.Valid {
			t.Errorf("%q: valid", in)
		}
	}
}
