package grants

// The map-based claims model the Verifier used before tokenClaims, kept as
// the reference of TestClaimsModelIsTheMapModel and FuzzClaimsModel: the
// typed path must give the same claims and the same errors for every
// claims segment segmentsError lets through.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

func oracleClaimsFromMap(m jwt.MapClaims) (*Claims, *refusal.Refusal) {
	c := &Claims{}
	var bad []claimProblem
	str := func(name string, required bool) string {
		v, ok := m[name]
		switch s, isStr := v.(string); {
		case isStr:
			return s
		case !ok && required:
			bad = append(bad, claimProblem{"missing", name, "", msgFieldRequired})
		case ok && (v != nil || required):
			bad = append(bad, claimProblem{"string_type", name, "", msgString})
		}
		return ""
	}

	c.Issuer = str("iss", true)
	c.Audience, bad = oracleAudienceClaim(m, bad)
	c.Subject = str("sub", false)
	c.GrantID = str("grant_id", true)
	if _, ok := m["grant_id"].(string); ok && c.GrantID == "" {
		// Stricter than the SDK, which takes an empty grant_id.
		bad = append(bad, claimProblem{"string_too_short", "grant_id", "", "String should have at least 1 character"})
	}
	c.WorkspaceID = str("workspace_id", true)
	c.WorkspaceSlug = str("workspace_slug", false)
	c.AgentID = str("agent_id", true)
	c.AgentSlug = str("agent_slug", true)
	c.ServerID = str("server_id", true)
	c.Scopes, bad = oracleScopesClaim(m, bad)
	c.AgentWorkspaceRef = str("agent_workspace_ref", false)
	c.IssuedAt, bad = oracleIntClaim(m, "iat", false, bad)
	c.ExpiresAt, bad = oracleIntClaim(m, "exp", true, bad)
	c.JTI = str("jti", false)
	c.NotBefore, bad = oracleIntClaim(m, "nbf", false, bad)
	if dev, ok := m["dev"]; ok && dev != nil {
		b, isBool := dev.(bool)
		if !isBool {
			bad = append(bad, claimProblem{"bool_type", "dev", "", "Input should be a valid boolean"})
		}
		c.Dev = b
	}
	if len(bad) > 0 {
		return nil, failText(CodeInvalidClaims, PrefixInvalidClaims+pythonRepr(bad), "claim "+bad[0].name+": "+bad[0].msg)
	}
	if c.Issuer == "" {
		return nil, fail(CodeWrongIssuer, "empty iss")
	}
	return c, nil
}

// oracleIntClaim reads an integer claim (its number as intNumber reads it)
// and adds its problem to bad.
func oracleIntClaim(m jwt.MapClaims, name string, required bool, bad []claimProblem) (int64, []claimProblem) {
	v, ok := m[name]
	if !ok || v == nil {
		switch {
		case required && !ok:
			bad = append(bad, claimProblem{"missing", name, "", msgFieldRequired})
		case required:
			bad = append(bad, claimProblem{"int_type", name, "", msgInt})
		}
		return 0, bad
	}
	n, isNum := v.(json.Number)
	if _, isStr := v.(string); isStr {
		return 0, append(bad, claimProblem{"int_parsing", name, "", msgIntParsing})
	}
	if !isNum {
		return 0, append(bad, claimProblem{"int_type", name, "", msgInt})
	}
	i, p := intNumber(string(n), name)
	if p != nil {
		return 0, append(bad, *p)
	}
	return i, bad
}

// oracleAudienceClaim reads "aud": a string or a list of strings (required).
func oracleAudienceClaim(m jwt.MapClaims, bad []claimProblem) ([]string, []claimProblem) {
	v, ok := m["aud"]
	switch aud := v.(type) {
	case string:
		return []string{aud}, bad
	case []any:
		out := make([]string, 0, len(aud))
		for i, a := range aud {
			s, isStr := a.(string)
			if !isStr {
				return nil, append(bad, claimProblem{"string_type", "aud", "str", msgString},
					claimProblem{"string_type", "aud", "list[str]\x00" + strconv.Itoa(i), msgString})
			}
			out = append(out, s)
		}
		return out, bad
	}
	if !ok {
		return nil, append(bad, claimProblem{"missing", "aud", "", msgFieldRequired})
	}
	return nil, append(bad, claimProblem{"string_type", "aud", "str", msgString},
		claimProblem{"list_type", "aud", "list[str]", msgList})
}

// oracleScopesClaim reads "scopes": a non-empty list of strings. Absent, it is
// empty (the SDK's default), so the scope check refuses the call
// (missing_scope); present and empty, it fails the model, as in the SDK.
func oracleScopesClaim(m jwt.MapClaims, bad []claimProblem) ([]string, []claimProblem) {
	v, ok := m["scopes"]
	if !ok {
		return nil, bad
	}
	list, isList := v.([]any)
	if !isList {
		return nil, append(bad, claimProblem{"list_type", "scopes", "", msgList})
	}
	out := make([]string, 0, len(list))
	for i, s := range list {
		scope, isStr := s.(string)
		if !isStr {
			bad = append(bad, claimProblem{"string_type", "scopes", "\x00" + strconv.Itoa(i), msgString})
			continue
		}
		out = append(out, scope)
	}
	if len(list) == 0 {
		bad = append(bad, claimProblem{"value_error", "scopes", "", "Value error, workspace authorization token must include scopes"})
	}
	return out, bad
}

// oracleDecode decodes a claims segment as golang-jwt did for the map model
// (jwt.WithJSONNumber: a json.Decoder with UseNumber into jwt.MapClaims).
func oracleDecode(seg []byte) (*Claims, *refusal.Refusal, error) {
	m := jwt.MapClaims{}
	dec := json.NewDecoder(bytes.NewReader(seg))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, nil, err
	}
	c, e := oracleClaimsFromMap(m)
	return c, e, nil
}

// typedDecode decodes a claims segment as the Verifier does now: the same
// encoding/json call golang-jwt makes for a non-map jwt.Claims.
func typedDecode(seg []byte) (*Claims, *refusal.Refusal, error) {
	var tc tokenClaims
	var claims jwt.Claims = &tc
	if err := json.Unmarshal(seg, &claims); err != nil {
		return nil, nil, err
	}
	c, e := claimsModel(&tc)
	return c, e, nil
}

// sameModel fails t unless the typed and the map model agree on seg, a
// claims segment segmentsError accepts.
func sameModel(t *testing.T, seg []byte) {
	t.Helper()
	wc, we, werr := oracleDecode(seg)
	gc, ge, gerr := typedDecode(seg)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%s: decode errors differ: map %v, typed %v", seg, werr, gerr)
	}
	if !reflect.DeepEqual(wc, gc) || !reflect.DeepEqual(we, ge) {
		t.Fatalf("%s:\n map   %+v %+v\n typed %+v %+v", seg, wc, we, gc, ge)
	}
}

// claimsSeeds are claims segments at the edges of the model: every claim
// absent, null, of each JSON type, escaped keys and values, keys differing
// only in case, numbers in every spelling, lists with non-strings.
var claimsSeeds = []string{
	`{"iss":"i","aud":"a","grant_id":"g","workspace_id":"w","agent_id":"a","agent_slug":"s","server_id":"x","scopes":["a","b"],"exp":1800000000}`,
	`{"iss":"i","aud":["a","b"],"sub":null,"grant_id":"g","workspace_id":"w","workspace_slug":null,"agent_id":"a","agent_slug":"s","server_id":"x","scopes":["a"],"agent_workspace_ref":null,"iat":null,"exp":1.8e9,"jti":null,"nbf":null,"dev":null}`,
	`{}`,
	`{"iss":null,"aud":null,"grant_id":null,"workspace_id":null,"agent_id":null,"agent_slug":null,"server_id":null,"scopes":null,"exp":null}`,
	`{"iss":1,"aud":1,"sub":1,"grant_id":1,"workspace_id":true,"workspace_slug":[],"agent_id":{},"agent_slug":["s"],"server_id":false,"scopes":"a","agent_workspace_ref":1.5,"iat":"1","exp":true,"jti":[],"nbf":{},"dev":"true"}`,
	`{"iss":"","aud":"","grant_id":"","workspace_id":"","agent_id":"","agent_slug":"","server_id":"","scopes":[],"exp":0}`,
	`{"ISS":"i","Aud":"a","GRANT_ID":"g","iss":"j","aud":["x"],"grant_id":"g","workspace_id":"w","agent_id":"a","agent_slug":"s","server_id":"x","scopes":["a"],"exp":1}`,
	`{"\u0069ss":"\u0069\n\"\\\/\u00e9\ud83d\ude00","a\u0075d":["\u0061"],"grant_id":"g","workspace_id":"w","agent_id":"a","agent_slug":"s","server_id":"x","scopes":["\u0061\t"],"exp":1}`,
	`{"iss":"i","aud":["a",1,"b",null],"grant_id":"g","workspace_id":"w","agent_id":"a","agent_slug":"s","server_id":"x","scopes":["a",1,{"x":[1,{"y":"]"}]},"b",null,[]],"exp":1}`,
	`{"iss":"i","aud":[],"grant_id":"g","workspace_id":"w","agent_id":"a","agent_slug":"s","server_id":"x","exp":-0,"iat":1e3,"nbf":-1.0E+2,"dev":true}`,
	`{"iss":"i","aud":"a","grant_id":"g","workspace_id":"w","agent_id":"a","agent_slug":"s","server_id":"x","scopes":["a"],"exp":9223372036854775807,"iat":9223372036854775808,"nbf":9007199254740993.0,"dev":false}`,
	`{"iss":"i","aud":"a","grant_id":"g","workspace_id":"w","agent_id":"a","agent_slug":"s","server_id":"x","scopes":["a"],"exp":1.5,"iat":1e400,"nbf":-9007199254740992,"dev":0}`,
	` { "iss" : "i" , "aud" : [ "a" , "b" ] , "scopes" : [ ] , "exp" : 12 , "other" : { "iss" : 1 } , "x" : [ "exp" ] } `,
}

// TestClaimsModelIsTheMapModel: on the seeds, the typed claims model gives
// exactly the claims and errors (code, text, detail) of the map model.
func TestClaimsModelIsTheMapModel(t *testing.T) {
	for _, s := range claimsSeeds {
		if !strictjson.IsObject([]byte(s), strictjson.MaxDepth) {
			t.Fatalf("seed is not a strict JSON object: %s", s)
		}
		sameModel(t, []byte(s))
	}
}

// FuzzClaimsModel: on any claims segment segmentsError accepts (a strict
// JSON object), the typed claims model agrees with the map model.
func FuzzClaimsModel(f *testing.F) {
	for _, s := range claimsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, seg []byte) {
		if !json.Valid(seg) || !strictjson.IsObject(seg, strictjson.MaxDepth) {
			return
		}
		sameModel(t, seg)
	})
}
