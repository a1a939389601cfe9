// The compact token read once: its three parts split, the header and the
// claims decoded from base64url once each and scanned once each (strict
// JSON, and the members Verify reads recorded in the same pass), the
// signature decoded. Verifier.verify then checks in golang-jwt's order with
// golang-jwt's answers (the parser it used before, kept by the tests as the
// oracle the answers are compared with: TestVerifyMatchesGolangJWT).

package grants

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tidwall/gjson"

	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// The header members read: by index in headerSchema's spans.
const (
	hdrAlg = iota
	hdrKID
	hdrCrit
	numHdr
)

var (
	headerSchema = strictjson.NewSchema([]string{hdrAlg: "alg", hdrKID: "kid", hdrCrit: "crit"})
	claimsSchema = strictjson.NewSchema(claimNames[:])
)

// tokenHeader is what the key sources read of a header: alg (a JSON
// string: golang-jwt refuses the token before the key otherwise) and kid.
type tokenHeader struct {
	alg       string
	kid       string
	kidString bool // kid is a JSON string ("" included)
}

// parsedToken is a compact token read by parseToken. signingInput and sig
// are in a scratch buffer lent by scratchPool: release gives it back, after
// which they must not be read (the header's and the claims' strings are
// copies of their own, kept by the claims).
type parsedToken struct {
	header       tokenHeader
	method       jwt.SigningMethod // golang-jwt's method of the header's alg
	crit         bool              // the header has a crit member
	signingInput []byte            // header "." claims, as signed
	sig          []byte
	claims       tokenClaims
	scratch      *[]byte // the lent buffer, nil once released
}

// scratchPool lends parseToken its working memory: the signing input (a
// copy of the token's first two parts, as the signature check takes bytes)
// and the decoded parts, about twice a token's size, none of which outlives
// the verification. Lending it instead of allocating it takes about 1.3 KiB
// a fresh token off the heap, and so off the garbage collector's work.
var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledScratch bounds a buffer given back to scratchPool: a larger one
// (a token of several KiB, up to MaxTokenBytes) is left to the collector, so
// that the pool never holds much for a rare large token.
const maxPooledScratch = 4 << 10

// release gives p's scratch buffer back to scratchPool.
func (p *parsedToken) release() {
	if p.scratch == nil {
		return
	}
	if cap(*p.scratch) <= maxPooledScratch {
		scratchPool.Put(p.scratch)
	}
	p.scratch, p.signingInput, p.sig = nil, nil, nil
}

// borrow sets p's scratch buffer to at least n bytes and returns it.
func (p *parsedToken) borrow(n int) []byte {
	bp := scratchPool.Get().(*[]byte)
	if cap(*bp) < n {
		*bp = make([]byte, n, max(n, 2<<10))
	}
	p.scratch = bp
	return (*bp)[:n]
}

// parseToken reads token into p: nil, or the *refusal.Refusal of the first problem,
// in the order and with the answers of segmentsError then golang-jwt's
// ParseUnverified (which the verifier ran one after the other): not three
// parts; a header or claims part that is not base64url of exactly one
// strict JSON object (each part checked in turn; a part that is JSON but
// not an object reported after both); a header golang-jwt's decoding into
// a map refuses (a number out of float64's range); the alg not a JSON
// string or not an algorithm golang-jwt knows; the signature not base64url.
// What golang-jwt checked after (alg EdDSA, crit, the key, the signature)
// is the caller's, who releases p (parsedToken.release) once the signature
// is checked, whatever parseToken answered.
func parseToken(token string, p *parsedToken) *refusal.Refusal {
	d1 := strings.IndexByte(token, '.')
	d2 := -1
	if d1 >= 0 {
		if d2 = strings.IndexByte(token[d1+1:], '.'); d2 >= 0 {
			d2 += d1 + 1
		}
	}
	if d2 < 0 || strings.IndexByte(token[d2+1:], '.') >= 0 {
		return failText(CodeMalformed, MsgNotCompactJWT, "not three dot-separated parts")
	}
	parts := [2]string{token[:d1], token[d1+1 : d2]}
	enc := base64.RawURLEncoding
	// The scratch buffer: the signing input, then the decoded parts.
	buf := p.borrow(d2 + enc.DecodedLen(len(parts[0])) + enc.DecodedLen(len(parts[1])) + enc.DecodedLen(len(token)-d2-1))
	copy(buf, token[:d2])
	var (
		seg       [2][]byte
		hdrSpans  [numHdr]strictjson.Span
		clSpans   [numClaims]strictjson.Span
		notObject bool
	)
	off := d2
	for i, part := range parts {
		n, err := enc.Decode(buf[off:], []byte(part))
		b := buf[off : off+n]
		off += n
		seg[i] = b
		if err != nil {
			return fail(CodeMalformed, "a part is not base64url of JSON")
		}
		schema, spans := headerSchema, hdrSpans[:]
		if i == 1 {
			schema, spans = claimsSchema, clSpans[:]
		}
		switch f := strictjson.Scan(b, strictjson.MaxDepth, schema, spans); {
		case isStrictObject(f, b):
		case !json.Valid(b):
			return fail(CodeMalformed, "a part is not base64url of JSON")
		case bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")):
			return fail(CodeMalformed, "a part is a JSON object with a duplicate key, a lone surrogate or deep nesting")
		default:
			notObject = true
		}
	}
	if notObject {
		return failText(CodeMalformed, MsgNotObjects, "a part is JSON but not an object")
	}
	// golang-jwt decoded the header into a map[string]any, which fails on
	// a number float64 cannot hold (1e999) and on nothing else a strict
	// object holds.
	if hasNumber(seg[0]) && json.Unmarshal(seg[0], new(map[string]any)) != nil {
		return fail(CodeMalformed, "Workspace authorization token is malformed")
	}
	hdr := string(seg[0])
	val := func(i int) string { return hdr[hdrSpans[i].Start:hdrSpans[i].End] }
	alg := val(hdrAlg)
	if rawKind(alg) == '"' {
		p.header.alg = rawString(alg)
		p.method = jwt.GetSigningMethod(p.header.alg)
	}
	if kid := val(hdrKID); rawKind(kid) == '"' {
		p.header.kidString, p.header.kid = true, rawString(kid)
	}
	p.crit = hdrSpans[hdrCrit].End != 0
	if p.method == nil { // alg absent, not a string, or no algorithm golang-jwt knows
		return fail(CodeUnsupportedAlg, "Workspace authorization token must be signed with EdDSA")
	}
	n, err := enc.Decode(buf[off:], []byte(token[d2+1:]))
	if err != nil {
		return fail(CodeMalformed, "Workspace authorization token is malformed")
	}
	p.sig = buf[off : off+n : off+n]
	p.signingInput = buf[:d2:d2]
	claims := string(seg[1]) // the claims' strings are substrings of this one copy
	for i := range p.claims.raw {
		p.claims.raw[i] = claims[clSpans[i].Start:clSpans[i].End]
	}
	return nil
}

// isStrictObject is strictjson.IsObject(b, strictjson.MaxDepth) from the
// facts of a scan of b with a schema: the same but for keys equal under
// case folding, which a scan with a schema reports instead of some exact
// duplicates (strictjson.Scan): b is then scanned again without one.
func isStrictObject(f strictjson.Facts, b []byte) bool {
	switch {
	case f.Invalid || f.TooDeep || f.Lone || f.Dup:
		return false
	case f.FoldDup:
		return strictjson.IsObject(b, strictjson.MaxDepth)
	}
	return strictjson.FirstByte(b) == '{'
}

// hasNumber reports whether the valid JSON b holds a number (a '-' or a
// digit outside its strings).
func hasNumber(b []byte) bool {
	in := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == '-' || c >= '0' && c <= '9'):
			return true
		}
	}
	return false
}

// The claims the model reads (claimsModel), in the model's field order:
// indexes of tokenClaims.raw and claimNames.
const (
	claimIss = iota
	claimAud
	claimSub
	claimGrantID
	claimWorkspaceID
	claimWorkspaceSlug
	claimAgentID
	claimAgentSlug
	claimServerID
	claimScopes
	claimAgentWorkspaceRef
	claimIat
	claimExp
	claimJTI
	claimNbf
	claimDev
	numClaims
)

// claimNames are the JSON names of the claims, by index.
var claimNames = [numClaims]string{"iss", "aud", "sub", "grant_id", "workspace_id", "workspace_slug",
	"agent_id", "agent_slug", "server_id", "scopes", "agent_workspace_ref", "iat", "exp", "jti", "nbf", "dev"}

// tokenClaims is the claims segment of a token: the raw JSON value of each
// claim the model reads ("" when absent), recorded by the one scan of the
// segment (parseToken, with claimsSchema), without a map. Keys match
// exactly after unescaping, as a map's would ("ISS" is not "iss";
// encoding/json's struct decoding would take it); other keys are skipped.
// The segment is a strict JSON object (no duplicate key, valid UTF-8, no
// lone surrogate). A claim of the wrong JSON type is found by claimsModel
// once the signature verified, so that a forged token is bad_signature
// whatever its claims hold. UnmarshalJSON reads it the way golang-jwt's
// parser did (the tests' oracle, VerifyGolangJWT).
type tokenClaims struct {
	raw [numClaims]string
}

// UnmarshalJSON records the raw value of each claim of b, a JSON object.
func (t *tokenClaims) UnmarshalJSON(b []byte) error {
	*t = tokenClaims{}
	gjson.ParseBytes(b).ForEach(func(k, v gjson.Result) bool {
		name := rawString(k.Raw)
		for i := range claimNames {
			if claimNames[i] == name {
				t.raw[i] = v.Raw
				break
			}
		}
		return true
	})
	return nil
}

// rawKind classifies a raw JSON value by its first byte: 0 (absent), '"'
// (string), 'n' (null), 't' and 'f' (booleans), '[' (array), '{' (object),
// '0' (number).
func rawKind(v string) byte {
	switch {
	case v == "":
		return 0
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		return '0'
	}
	return v[0]
}

// rawString is the value of a raw JSON string literal, unescaped as
// encoding/json does (the decoder the claims went through before). Without
// an escape it is a substring of raw: no copy.
func rawString(raw string) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	if !strings.Contains(raw, `\`) {
		return raw[1 : len(raw)-1]
	}
	var s string
	if json.Unmarshal([]byte(raw), &s) != nil {
		return ""
	}
	return s
}

// The jwt.Claims methods. The Verifier parses with
// jwt.WithoutClaimsValidation and checks the claims itself (checkClaims:
// the SDK's order of checks, whole seconds, exp + leeway inclusive), so
// golang-jwt never calls them; they answer from the same model, a claim of
// the wrong type reading as absent.

func (t *tokenClaims) numericDate(i int) (*jwt.NumericDate, error) {
	if rawKind(t.raw[i]) != '0' {
		return nil, nil
	}
	n, bad := intClaim(t.raw[i], claimNames[i], false, nil)
	if len(bad) > 0 {
		return nil, nil
	}
	return jwt.NewNumericDate(time.Unix(n, 0)), nil
}

// GetExpirationTime implements jwt.Claims.
func (t *tokenClaims) GetExpirationTime() (*jwt.NumericDate, error) { return t.numericDate(claimExp) }

// GetIssuedAt implements jwt.Claims.
func (t *tokenClaims) GetIssuedAt() (*jwt.NumericDate, error) { return t.numericDate(claimIat) }

// GetNotBefore implements jwt.Claims.
func (t *tokenClaims) GetNotBefore() (*jwt.NumericDate, error) { return t.numericDate(claimNbf) }

// GetIssuer implements jwt.Claims.
func (t *tokenClaims) GetIssuer() (string, error) { return rawString(t.raw[claimIss]), nil }

// GetSubject implements jwt.Claims.
func (t *tokenClaims) GetSubject() (string, error) { return rawString(t.raw[claimSub]), nil }

// GetAudience implements jwt.Claims.
func (t *tokenClaims) GetAudience() (jwt.ClaimStrings, error) {
	aud, bad := audienceClaim(t.raw[claimAud], nil, []string{})
	if len(bad) > 0 {
		return nil, nil
	}
	return aud, nil
}

var _ jwt.Claims = (*tokenClaims)(nil)
