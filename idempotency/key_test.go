package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func TestKeyIDUnambiguous(t *testing.T) {
	// Pairs that a naive join of the fields with a separator would merge.
	pairs := [][2]Key{
		{{"a:b", "c", "job.start", "k"}, {"a", "b:c", "job.start", "k"}},
		{{"w", "s", "job.start", "k|x"}, {"w", "s", "job.start|k", "x"}},
		{{"ws", "", "job.start", "k"}, {"w", "s", "job.start", "k"}},
		{{"", "", "", "abc"}, {"abc", "", "", ""}},
		{{"w\x00", "s", "a", "k"}, {"w", "\x00s", "a", "k"}},
		{{"workspace_123", "agent_interviewer", "job.start", "k"}, {"workspace_123", "agent_interviewer", "job.start.preview", "k"}},
	}
	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for _, p := range pairs {
		a, b := p[0].ID(), p[1].ID()
		if a == b {
			t.Errorf("collision: %#v and %#v -> %s", p[0], p[1], a)
		}
		if !hex64.MatchString(a) || !hex64.MatchString(b) {
			t.Errorf("ID not 64 hex chars: %q %q", a, b)
		}
	}
	k := Key{"workspace_123", "agent_interviewer", "job.start", "idem_start_campaign_123"}
	if k.ID() != k.ID() {
		t.Error("ID not deterministic")
	}
}

func TestFingerprintFixtureVector(t *testing.T) {
	f := loadFixture(t)
	got, err := Fingerprint(f.Request.MissionID, f.Request.JobID, f.Request.Input)
	if err != nil {
		t.Fatal(err)
	}
	canonical := `{"input":{"campaign_id":"campaign_123"},"job_id":"job_123","mission_id":"mission_123"}`
	sum := sha256.Sum256([]byte(canonical))
	if want := hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("Fingerprint = %s, want sha256(%s) = %s", got, canonical, want)
	}
}

func TestFingerprintCanonical(t *testing.T) {
	fp := func(mission, job, input string) string {
		t.Helper()
		var in json.RawMessage
		if input != "<absent>" {
			in = json.RawMessage(input)
		}
		s, err := Fingerprint(mission, job, in)
		if err != nil {
			t.Fatalf("Fingerprint(%q,%q,%s): %v", mission, job, input, err)
		}
		return s
	}
	same := []struct{ name, a, b string }{
		{"key order and whitespace", `{"b":1,"a":{"y":[1,2,{"d":1,"c":2}],"x":null}}`, ` { "a" : { "x" : null , "y" : [ 1 , 2 , { "c" : 2 , "d" : 1 } ] } , "b" : 1 } `},
		{"string escapes", `{"k":"A\u00e9\/<>&"}`, `{"k":"Aé/<>&"}`},
		{"null input is {}", `null`, `{}`},
		{"absent input is {}", `<absent>`, `{}`},
		{"empty object spacing", `{ }`, `{}`},
	}
	for _, c := range same {
		if fp("m", "j", c.a) != fp("m", "j", c.b) {
			t.Errorf("%s: fingerprints differ for %s and %s", c.name, c.a, c.b)
		}
	}

	base := fp("mission_123", "job_123", `{"campaign_id":"campaign_123"}`)
	differ := []struct {
		name string
		got  string
	}{
		{"input value", fp("mission_123", "job_123", `{"campaign_id":"campaign_124"}`)},
		{"extra input field", fp("mission_123", "job_123", `{"campaign_id":"campaign_123","x":1}`)},
		{"nested type", fp("mission_123", "job_123", `{"campaign_id":["campaign_123"]}`)},
		{"mission_id", fp("mission_124", "job_123", `{"campaign_id":"campaign_123"}`)},
		{"job_id", fp("mission_123", "job_124", `{"campaign_id":"campaign_123"}`)},
		{"job_id absent", fp("mission_123", "", `{"campaign_id":"campaign_123"}`)},
		{"number literal", fp("mission_123", "job_123", `{"campaign_id":"campaign_123","n":1.0}`)},
	}
	for _, c := range differ {
		if c.got == base {
			t.Errorf("%s: fingerprint unchanged", c.name)
		}
	}
	if fp("m", "", `{}`) == fp("m", "null", `{}`) {
		t.Error(`job_id absent (null) and job_id "null" (a string) collide`)
	}
	// job_id absent counts as null: the canonical text says so.
	sum := sha256.Sum256([]byte(`{"input":{},"job_id":null,"mission_id":"m"}`))
	if got := fp("m", "", `<absent>`); got != hex.EncodeToString(sum[:]) {
		t.Errorf("absent job and input: %s, want %x", got, sum)
	}
}

func TestFingerprintRefusesBadInput(t *testing.T) {
	for _, in := range []string{
		`{"a":1`,                 // truncated
		`{"a":1}{"b":2}`,         // trailing data
		`{"a":1,"a":2}`,          // duplicate key
		`{"x":{"a":1,"a":1}}`,    // nested duplicate key
		`[{"k":true,"k":false}]`, // duplicate inside array
		`{a:1}`,                  // not JSON
		`{"a":"\ud800"}`,         // lone surrogate escape (strictjson)
		`{"a":"\udc00\ud800"}`,   // reversed pair
		strings.Repeat("[", 65) + strings.Repeat("]", 65), // deeper than strictjson.MaxDepth
		"{\"a\":\"\xff\"}", // invalid UTF-8
	} {
		if _, err := Fingerprint("m", "j", json.RawMessage(in)); err == nil {
			t.Errorf("Fingerprint accepted %s", in)
		}
	}
}

func TestRewriteResult(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"created", `{"status":"ok"}`, `{"replay_safety":{"strictly_idempotent_response":true},"status":"ok"}`},
		{"kept other fields", `{"status":"ok","replay_safety":{"replay_token":"t1","strictly_idempotent_response":false}}`,
			`{"replay_safety":{"replay_token":"t1","strictly_idempotent_response":true},"status":"ok"}`},
		{"null replaced", `{"replay_safety":null}`, `{"replay_safety":{"strictly_idempotent_response":true}}`},
		{"non-object replaced", `{"replay_safety":"yes"}`, `{"replay_safety":{"strictly_idempotent_response":true}}`},
		{"no HTML escaping", `{"m":"<a&b>"}`, `{"m":"<a&b>","replay_safety":{"strictly_idempotent_response":true}}`},
	}
	for _, c := range cases {
		got, err := rewriteResult(json.RawMessage(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	for _, bad := range []string{`"ok"`, `[1]`, `null`, `12`, ``} {
		if _, err := rewriteResult(json.RawMessage(bad)); err == nil {
			t.Errorf("rewriteResult accepted %q", bad)
		}
	}
}

func TestErrorShape(t *testing.T) {
	e := errStoreUnavailable(ErrStoreFull)
	if e.Code != CodeStoreUnavailable || e.Message == "" {
		t.Fatalf("%+v", e)
	}
	if e.Error() == e.Message {
		t.Error("Error() should include the code and cause")
	}
	if e.Unwrap() != ErrStoreFull {
		t.Error("Unwrap lost the cause")
	}
	if ip := errInProgress(nil); ip.Code != CodeInProgress || ip.Unwrap() != nil {
		t.Fatalf("%+v", ip)
	}
	if JSONRPCCode != -32031 {
		t.Fatal("JSON-RPC code must be -32031")
	}
}

// TestFingerprintEmptyJobID: "job_id": "" and job_id absent (or null) are
// two identities, as in Python ("" is not None); a non-empty job_id and an
// absent one keep the fingerprints Fingerprint always gave them.
func TestFingerprintEmptyJobID(t *testing.T) {
	in := json.RawMessage(`{"a":1}`)
	fp := func(job string, has bool) string {
		t.Helper()
		s, err := FingerprintIdentities("m", job, has, in)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	absent, empty := fp("", false), fp("", true)
	if absent == empty {
		t.Fatalf(`"job_id": "" and job_id absent share fingerprint %s`, absent)
	}
	canonical := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	if want := canonical(`{"input":{"a":1},"job_id":"","mission_id":"m"}`); empty != want {
		t.Fatalf("empty job_id: %s, want %s", empty, want)
	}
	if old, _ := Fingerprint("m", "", in); old != absent {
		t.Fatalf("absent job_id: %s, Fingerprint gives %s", absent, old)
	}
	if old, _ := Fingerprint("m", "j", in); old != fp("j", true) {
		t.Fatal("a non-empty job_id changed fingerprint")
	}
}

// TestFingerprintStringsAsBefore: the strings of a fingerprint are written
// as Go's encoder wrote them before strictjson (SetEscapeHTML(false)), so
// the fingerprints of records already stored do not change.
func TestFingerprintStringsAsBefore(t *testing.T) {
	enc := func(s string) string {
		var b strings.Builder
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false)
		if err := e.Encode(s); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	for _, s := range []string{"", "a", "<&>", "\u2028\u2029", "\x00\x01\x1f\x7f", "\b\f\n\r\t", `"\`, "é😀", "\ufffd"} {
		in, _ := json.Marshal(map[string]string{s: s})
		got, err := FingerprintIdentities(s, s, true, in)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(`{"input":{` + enc(s) + `:` + enc(s) + `},"job_id":` + enc(s) + `,"mission_id":` + enc(s) + `}`))
		if want := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%q: %s, want %s", s, got, want)
		}
	}
}

// TestFingerprintVectors: fingerprints of records already stored do not
// change when the way the canonical form is computed does (these were
// computed from the decoded tree, before HashCanonicalRaw): escapes, key
// order, numbers as written, an empty key, a nested empty object.
func TestFingerprintVectors(t *testing.T) {
	for _, c := range []struct{ input, want string }{
		{` {"b":[1,2.50,{"y":null,"x":true}],"a":"A\u00e9\n","\u0063":"😀\u2028","":{}} `,
			"079b807c9d03859df7919b130f6ac34290f27a6e26a46a4052ed839fbe3a8dcf"},
		{`{}`, "9400b6fbaa52c10baae23b800f6271a33bbdf7c715cae316d59b3e2524ccf7b8"},
		{`[]`, "efbea16dd498cb4f855c9f5ae0d98e35df97faaea62289a751b6ab18908bcb99"},
		{`"x"`, "4c25dfe774e542c7bf57ba67fb2591dd65abd74dbdaa879a86f25ca32c64bad4"},
	} {
		got, err := FingerprintIdentities("mission_1", "", true, json.RawMessage(c.input))
		if err != nil || got != c.want {
			t.Errorf("FingerprintIdentities(%s) = %s, %v; want %s", c.input, got, err, c.want)
		}
		// The gate's form, for an input its parse already checked.
		if got := FingerprintChecked("mission_1", "", true, json.RawMessage(c.input)); got != c.want {
			t.Errorf("FingerprintChecked(%s) = %s; want %s", c.input, got, c.want)
		}
	}
	if a, b := FingerprintChecked("m", "", false, nil), FingerprintChecked("m", "", false, json.RawMessage(" null ")); a != b || a == FingerprintChecked("m", "", true, nil) {
		t.Errorf("FingerprintChecked: absent and null input differ (%s, %s), or job_id's presence is lost", a, b)
	}
}
