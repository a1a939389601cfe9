package grants_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// checkMatchesGolangJWT fails t unless Verify (each part of the token read
// once: grants/token.go) answers token as the verify it replaced, kept as
// VerifyGolangJWT (segmentsError, then golang-jwt's parser): the same
// claims, or the same refusal (code, message, detail, refused claims). v has
// no cache, so that every call reads the token.
func checkMatchesGolangJWT(t testing.TB, v *grants.Verifier, token string) {
	t.Helper()
	got, err := v.Verify(ctx, token)
	var gotErr *refusal.Refusal
	if err != nil && !errors.As(err, &gotErr) {
		t.Fatalf("error %T %v", err, err)
	}
	want, wantErr := v.VerifyGolangJWT(ctx, token, grants.VerifyOptions{})
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErr, wantErr) {
		t.Fatalf("token %q:\n Verify        %+v %+v\n golang-jwt's  %+v %+v", token, got, gotErr, want, wantErr)
	}
}

// parseOnceHeaders and parseOnceClaims are header and claims texts at the
// edges of what the two readings check: alg spelled, typed and escaped
// every way, crit present however, kid typed every way, numbers out of
// float64's range (golang-jwt's header map refuses them), keys equal under
// case folding (read objects keep one of a class), and parts that are not
// objects, not JSON, or JSON with trailing data.
func parseOnceHeaders() []string {
	many := ""
	for i := range 40 {
		many += `,"h` + strconv.Itoa(i) + `":0`
	}
	return []string{
		`{"alg":"EdDSA","typ":"JWT","kid":"k1"}`, `{"alg":"EdDSA"}`, `{"alg":"EdDSA","kid":"k1"}`, ` {"alg" : "EdDSA" , "kid":"k1"} `,
		`{"alg":"ED25519","kid":"k1"}`, `{"alg":"HS256","kid":"k1"}`, `{"alg":"none","kid":"k1"}`, `{"alg":"RS256"}`, `{"alg":"eddsa"}`,
		`{"alg":"Ed\u0044SA","kid":"k\u0031"}`, `{"\u0061lg":"EdDSA","kid":"k1"}`, `{"alg":1}`, `{"alg":null}`, `{"alg":true}`, `{"alg":["EdDSA"]}`,
		`{"alg":{"x":"EdDSA"}}`, `{}`, `{"ALG":"EdDSA"}`, `{"alg":"EdDSA","ALG":"HS256","kid":"k1"}`, `{"alg":"EdDSA","kid":"k1","KID":"k2"}`,
		`{"alg":"EdDSA","crit":null}`, `{"alg":"EdDSA","\u0063rit":[]}`, `{"alg":"EdDSA","crit":["exp"],"kid":"k1"}`, `{"alg":"EdDSA","CRIT":1,"kid":"k1"}`,
		`{"alg":"EdDSA","kid":1}`, `{"alg":"EdDSA","kid":""}`, `{"alg":"EdDSA","kid":null}`, `{"alg":"EdDSA","kid":"nope"}`, `{"alg":"HS256","kid":1e999}`,
		`{"alg":"EdDSA","kid":"k1","x":1e999}`, `{"alg":"EdDSA","kid":"k1","x":-1e400}`, `{"alg":"EdDSA","kid":"k1","x":1e-400}`,
		`{"alg":"EdDSA","kid":"k1","x":[{"y":` + strings.Repeat("9", 400) + `}]}`, `{"alg":"EdDSA","kid":"k1","x":"1e999"}`,
		`{"alg":"EdDSA","kid":"k1","x":"\"1e999"}`, `{"alg":"EdDSA","kid":"k1","x":-0}`, `{"kid":"k1","x":1e999}`,
		`{"alg":"EdDSA","alg":"EdDSA"}`, `{"alg":"EdDSA","kid":"k1","a":0,"A":1` + many + `,"a":2}`, `{"alg":"EdDSA","kid":"k1","a":0,"A":1` + many + `,"A":2}`,
		`{"alg":"EdDSA","kid":"k1"` + many + `}`, `{"alg":"EdDSA","kid":"\ud800"}`, "{\"alg\":\"EdDSA\",\"kid\":\"\xff\"}",
		`null`, `[]`, `"EdDSA"`, `1`, `{"alg":"EdDSA"} {}`, `{"alg":"EdDSA"`, ``, ` `, `{"alg":"EdDSA",}`,
		`{"alg":"EdDSA","kid":"k1","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
	}
}

func parseOnceClaims(t testing.TB) []string {
	base := mustJSON(t, baseClaims())
	return []string{
		base, strings.Replace(base, `"iss"`, `"ISS":"x","iss"`, 1), strings.Replace(base, `"iss"`, `"\u0069ss"`, 1),
		strings.Replace(base, `"grant_1"`, `"gr\u0061nt_1"`, 1), strings.Replace(base, `"iss"`, `"iss":"x","iss"`, 1),
		strings.Replace(base, `"jti_1"`, `1e999`, 1), strings.Replace(base, `{`, `{"x":[1,{"y":null}],`, 1),
		strings.Replace(base, `"scopes"`, `"Scopes":1,"scopes"`, 1), " " + base + " ", base + " {}",
		`{}`, `null`, `[]`, `{"iss":`, `{"a":0,"A":1,"b":2}`,
	}
}

// parseOnceTokens are the tokens of the differential test: the fuzz seed
// corpora of FuzzVerify and FuzzVerifySigned, every header of
// parseOnceHeaders with every claims text of parseOnceClaims signed by s
// (and by another key), and byte mutations of valid tokens.
func parseOnceTokens(t testing.TB, s *signer) []string {
	other := newSigner(t, "k1")
	var tokens []string
	for _, h := range parseOnceHeaders() {
		for _, c := range parseOnceClaims(t) {
			tokens = append(tokens, s.raw(h, c))
		}
		tokens = append(tokens, other.raw(h, parseOnceClaims(t)[0]))
	}
	good := s.mintWith(t, nil)
	p := strings.Split(good, ".")
	tokens = append(tokens, good, "", ".", "..", "...", p[0]+"."+p[1], p[0]+"."+p[1]+".", p[0]+".."+p[2], "."+p[1]+"."+p[2],
		good+".", good+"=", p[0]+"="+"."+p[1]+"."+p[2], p[0]+"."+p[1]+"."+p[2]+"==", p[0]+"\n."+p[1]+"."+p[2], p[0]+"."+p[1]+".\r\n"+p[2],
		p[0]+"."+p[1]+"."+p[2][:len(p[2])-1], p[0]+"."+p[1]+"."+p[2][:len(p[2])-2], p[0]+"."+p[1]+"."+p[2]+"A",
		s.mint(t, baseClaims(), map[string]any{"crit": []any{"exp"}}), s.mint(t, baseClaims(), map[string]any{"alg": "none"}),
		strings.Repeat("a", grants.MaxTokenBytes+1))
	// The seed corpora (go test fuzz v1: one quoted string a line).
	for _, dir := range []string{"FuzzVerify", "FuzzVerifySigned"} {
		files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", dir, "*"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var vals []string
			for _, line := range strings.Split(string(b), "\n")[1:] {
				if q, ok := strings.CutPrefix(line, "string("); ok {
					if v, err := strconv.Unquote(strings.TrimSuffix(q, ")")); err == nil {
						vals = append(vals, v)
					}
				}
			}
			switch {
			case dir == "FuzzVerify" && len(vals) == 1:
				tokens = append(tokens, vals[0])
			case dir == "FuzzVerifySigned" && len(vals) == 2:
				tokens = append(tokens, s.raw(vals[0], vals[1]))
			}
		}
	}
	// Mutations: a byte replaced, deleted or inserted, deterministic.
	rng := rand.New(rand.NewPCG(34, 34))
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ \n\x00\xff"
	seeds := []string{good, s.raw(`{"alg":"EdDSA","kid":"k1"}`, parseOnceClaims(t)[0])}
	for range 3000 {
		tok := []byte(seeds[rng.IntN(len(seeds))])
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(tok))
			c := alphabet[rng.IntN(len(alphabet))]
			switch rng.IntN(3) {
			case 0:
				tok[i] = c
			case 1:
				tok = append(tok[:i:i], tok[i+1:]...)
			default:
				tok = append(tok[:i:i], append([]byte{c}, tok[i:]...)...)
			}
		}
		tokens = append(tokens, string(tok))
	}
	return tokens
}

// TestVerifyMatchesGolangJWT: Verify, which reads each part of a token once
// (grants/token.go), answers every token of parseOnceTokens as the verify
// it replaced (VerifyGolangJWT: segmentsError, then golang-jwt's parser),
// with a PEM key and with a JWKS (kid lookups), caches off.
func TestVerifyMatchesGolangJWT(t *testing.T) {
	s := fuzzSigner()
	clk := newClock()
	noCache := func(c *grants.Config) { c.CacheSize = -1 }
	pem := pemVerifier(t, s.pub, clk, noCache)
	j := startJWKS(t, s.jwk())
	jwks := jwksVerifier(t, j.url(), clk, noCache)
	eventually(t, "the JWKS loads", jwks.Ready, func() string { return "not ready" })
	tokens := parseOnceTokens(t, s)
	for _, v := range []*grants.Verifier{pem, jwks} {
		for _, tok := range tokens {
			checkMatchesGolangJWT(t, v, tok)
		}
	}
}

// FuzzVerifyMatchesGolangJWT: for any token, Verify answers as the verify
// it replaced (checkMatchesGolangJWT), PEM key.
func FuzzVerifyMatchesGolangJWT(f *testing.F) {
	s := fuzzSigner()
	for _, tok := range parseOnceTokens(f, s)[:400] {
		f.Add(tok)
	}
	v := pemVerifier(f, s.pub, newClock(), func(c *grants.Config) { c.CacheSize = -1 })
	f.Fuzz(func(t *testing.T, token string) { checkMatchesGolangJWT(t, v, token) })
}
