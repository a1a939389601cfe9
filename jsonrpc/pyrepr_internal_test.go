package jsonrpc

import "testing"

// TestPyStrRepr: the texts Python's repr() gives (checked with CPython
// 3.11 against the SDK's f"{value!r}").
func TestPyStrRepr(t *testing.T) {
	for in, want := range map[string]string{
		"other":       `'other'`,
		"it's":        `"it's"`,
		`a"b`:         `'a"b'`,
		`a'b"c`:       `'a\'b"c'`,
		"tab\there":   `'tab\there'`,
		"nl\n":        `'nl\n'`,
		`bs\`:         `'bs\\'`,
		"\x00\x7f":    `'\x00\x7f'`,
		"é日本":         `'é日本'`,
		"\u200b":      `'\u200b'`,
		"\U0001F600":  "'\U0001F600'",
		"\ud7ff":      `'\ud7ff'`,
		"":            `''`,
		"mission_123": `'mission_123'`,
	} {
		if got := pyStrRepr(in); got != want {
			t.Errorf("pyStrRepr(%q) = %s, want %s", in, got, want)
		}
	}
}
