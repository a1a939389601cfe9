package jsonrpc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"unicode"
	"unicode/utf8"
)

// jsonFacts is what one pass over a valid JSON document finds, up to the
// point where the pass stops (the first duplicate key, or the first
// container nested deeper than MaxDepth).
type jsonFacts struct {
	depth  int    // deepest nesting of objects and arrays
	lone   bool   // a string holds an escaped lone UTF-16 surrogate
	dup    bool   // an object holds the same key twice (after unescaping)
	dupKey string // the first duplicated key
	// foldDup: an object Parse reads (see objKind) holds two keys equal
	// under Unicode case folding (bytes.EqualFold), as Go's encoding/json
	// matches field names: a Go agent could read the other one. Recorded
	// without stopping the scan.
	foldDup bool
}

// bad reports whether the facts refuse the document: nesting deeper than
// MaxDepth, a lone surrogate escape or a duplicate key.
func (f *jsonFacts) bad() bool { return f.depth > MaxDepth || f.lone || f.dup || f.foldDup }

// keyRef is one object key seen so far: b[start:end], its raw bytes between
// the quotes, or, when it held an escape, unescaped[start:end] (see
// scanJSON). It holds no pointer, so that keeping keys costs no write
// barrier.
type keyRef struct {
	start, end int
	unescaped  bool
}

// manyKeys is the key count past which an object's keys are indexed in a map
// rather than compared one by one.
const manyKeys = 32

// span is where a member's value lies in the body: b[start:end], the value's
// raw JSON text without surrounding whitespace; end is 0 when the member is
// absent.
type span struct{ start, end int }

// objKind names an object whose members Parse reads: scanJSON records the
// spans of their values in a fields. kNone objects are only checked.
type objKind uint8

// The objects Parse reads. A request object is params itself, or
// params.action_request, or params.surface_request (Parse decides which once
// it knows the method, which may come after params in the body), so all
// three are recorded, each with its own actor, workspace and mission.
const (
	kNone      objKind = iota
	kRoot              // the envelope
	kReq               // kReq+r: request object r (reqParams, reqAction, reqSurface)
	kActor     = kReq + nReq
	kWorkspace = kActor + nReq
	kMission   = kWorkspace + nReq
)

// Request objects (see sReq).
const (
	reqParams  = 0 // params
	reqAction  = 1 // params.action_request
	reqSurface = 2 // params.surface_request
	nReq       = 3
)

// Members of the envelope (see sRoot).
const (
	eJSONRPC = iota
	eID
	eMethod
	eParams
	nEnvelope
)

// Members of a V2ActionRequest / V2SurfaceRequest the gate reads (see sReq);
// the last two are only recorded in params.
const (
	fRequestID = iota
	fActor
	fWorkspace
	fMissionID
	fAgentSlug
	fSurface
	fAction
	fIdempotencyKey
	fJobID
	fDraftSessionID
	fCaseID
	fStepID
	fInput
	fMission
	fWorkspaceAuthorization
	fActionRequest  // params only
	fSurfaceRequest // params only
	nRequest
)

// Slots of fields: where scanJSON records the value of each member Parse
// reads. Slot 0 records nothing.
const (
	sRoot      = 1                    // + eJSONRPC ... eParams
	sReq       = sRoot + nEnvelope    // + r*nRequest + fRequestID ... fSurfaceRequest
	sActor     = sReq + nReq*nRequest // + r: actor.user_id
	sWorkspace = sActor + nReq        // + 2r: workspace.id, + 2r+1: workspace.slug
	sMission   = sWorkspace + 2*nReq  // + 2r: mission.id, + 2r+1: mission.metadata
	nSlots     = sMission + 2*nReq
)

// fields holds the value spans of the members Parse reads, filled by one
// scan of the body; see the slots above.
type fields [nSlots]span

// requestField returns the index (fRequestID ...) of a request member, or -1.
func requestField(key []byte) int {
	switch string(key) {
	case "request_id":
		return fRequestID
	case "actor":
		return fActor
	case "workspace":
		return fWorkspace
	case "mission_id":
		return fMissionID
	case "agent_slug":
		return fAgentSlug
	case "surface":
		return fSurface
	case "action":
		return fAction
	case "idempotency_key":
		return fIdempotencyKey
	case "job_id":
		return fJobID
	case "draft_session_id":
		return fDraftSessionID
	case "case_id":
		return fCaseID
	case "step_id":
		return fStepID
	case "input":
		return fInput
	case "mission":
		return fMission
	case "workspace_authorization":
		return fWorkspaceAuthorization
	case "action_request":
		return fActionRequest
	case "surface_request":
		return fSurfaceRequest
	}
	return -1
}

// member returns the slot where to record the value of the member key
// (unescaped) of an object of kind k (0 when it is not read), and the kind of
// that value if it is an object.
func member(k objKind, key []byte) (int, objKind) {
	switch {
	case k == kRoot:
		switch string(key) {
		case "jsonrpc":
			return sRoot + eJSONRPC, kNone
		case "id":
			return sRoot + eID, kNone
		case "method":
			return sRoot + eMethod, kNone
		case "params":
			return sRoot + eParams, kReq + reqParams
		}
	case k < kActor:
		r := int(k - kReq)
		n := requestField(key)
		slot := sReq + r*nRequest + n
		switch n {
		case -1:
			return 0, kNone
		case fActor:
			return slot, kActor + objKind(r)
		case fWorkspace:
			return slot, kWorkspace + objKind(r)
		case fMission:
			return slot, kMission + objKind(r)
		case fActionRequest:
			if r == reqParams {
				return slot, kReq + reqAction
			}
			return 0, kNone
		case fSurfaceRequest:
			if r == reqParams {
				return slot, kReq + reqSurface
			}
			return 0, kNone
		}
		return slot, kNone
	case k < kWorkspace:
		if string(key) == "user_id" {
			return sActor + int(k-kActor), kNone
		}
	case k < kMission:
		switch string(key) {
		case "id":
			return sWorkspace + 2*int(k-kWorkspace), kNone
		case "slug":
			return sWorkspace + 2*int(k-kWorkspace) + 1, kNone
		}
	default:
		switch string(key) {
		case "id":
			return sMission + 2*int(k-kMission), kNone
		case "metadata":
			return sMission + 2*int(k-kMission) + 1, kNone
		}
	}
	return 0, kNone
}

// frame is one open container.
type frame struct {
	object bool
	kind   objKind // for objects: whose members to record
	start  int     // keys[start:] are this object's keys
	ustart int     // and unescaped[ustart:] holds the unescaped ones
	mask   uint64  // keyBit of each of them
	seen   int     // 1 + index in maps of the set of them, once there are many
	// For objects Parse reads (kind != kNone) the keys are compared under
	// case folding instead (mask and seen unused):
	fmask uint64 // foldBit of each ASCII key
	fwild bool   // a key holds a non-ASCII byte: compare every key
	fseen int    // 1 + index in folds of the set of folded keys, once there are many
	at    int    // slot where to record its span (0: none)
	vs    int    // where it starts
}

// scanJSON walks b, which must be valid JSON (gjson.ValidBytes), once:
// nesting depth, lone surrogate escapes (see surrogateEscape) and duplicate
// object keys at any depth, keys compared after JSON unescaping. It stops at
// the first duplicate key and at the first container nested deeper than
// MaxDepth. Keys without escapes are compared in place (no allocation).
//
// When f is not nil, scanJSON also records in f the value spans of the
// members Parse reads (see fields), the root being the envelope. They are
// complete only when the facts are not bad().
func scanJSON(b []byte, f *fields) jsonFacts {
	var (
		facts     jsonFacts
		frameBuf  [16]frame
		keyBuf    [64]keyRef
		unescaped []byte                // the keys that held an escape, unescaped
		maps      []map[string]struct{} // key sets of the open objects with many keys
		folds     []map[string]string   // folded key → key, for the open read objects with many keys
	)
	stack, keys := frameBuf[:0], keyBuf[:0] // on the stack for ordinary bodies
	bytesOf := func(k keyRef) []byte {
		if k.unescaped {
			return unescaped[k.start:k.end]
		}
		return b[k.start:k.end]
	}
	kind := kNone // of the value at b[i], if an object
	if f != nil {
		kind = kRoot
	}
	at := 0 // slot where to record the value at b[i]
	i := skipSpace(b, 0)
	for {
		// A value starts at b[i].
		switch c := b[i]; c {
		case '{', '[':
			if len(stack) == MaxDepth {
				facts.depth = MaxDepth + 1
				return facts
			}
			stack = append(stack, frame{object: c == '{', kind: kind, start: len(keys), ustart: len(unescaped), at: at, vs: i})
			if len(stack) > facts.depth {
				facts.depth = len(stack)
			}
			i = skipSpace(b, i+1)
			if b[i] == '}' || b[i] == ']' {
				break // empty
			}
			if c == '{' {
				goto key
			}
			kind, at = kNone, 0
			continue
		case '"':
			vs := i
			var lone bool
			i, _, lone = str(b, i)
			facts.lone = facts.lone || lone
			if at != 0 {
				f[at] = span{vs, i}
			}
			i = skipSpace(b, i)
		default: // number, true, false, null
			vs := i
			for i++; i < len(b) && !scalarEnd[b[i]]; i++ {
			}
			if at != 0 {
				f[at] = span{vs, i}
			}
			i = skipSpace(b, i)
		}
		// After a value: b[i] is ',' or closes containers (or the body ends).
		for {
			if len(stack) == 0 {
				return facts
			}
			if b[i] == ',' {
				break
			}
			i++
			top := &stack[len(stack)-1]
			if top.at != 0 {
				f[top.at] = span{top.vs, i}
			}
			keys, unescaped = keys[:top.start], unescaped[:top.ustart]
			if top.seen != 0 {
				maps[top.seen-1] = nil
				maps = maps[:top.seen-1]
			}
			if top.fseen != 0 {
				folds[top.fseen-1] = nil
				folds = folds[:top.fseen-1]
			}
			stack = stack[:len(stack)-1]
			i = skipSpace(b, i)
		}
		i = skipSpace(b, i+1)
		if !stack[len(stack)-1].object {
			kind, at = kNone, 0
			continue
		}
	key:
		// An object member starts at b[i].
		{
			top := &stack[len(stack)-1]
			ks := i + 1
			var esc, lone bool
			i, esc, lone = str(b, i)
			facts.lone = facts.lone || lone
			ref := keyRef{start: ks, end: i - 1}
			if esc {
				var u string
				if err := json.Unmarshal(b[ks-1:i], &u); err == nil {
					ref = keyRef{start: len(unescaped), end: len(unescaped) + len(u), unescaped: true}
					unescaped = append(unescaped, u...)
				}
			}
			key := bytesOf(ref)
			if top.kind != kNone {
				// An object Parse reads: keys compared under case folding,
				// which also finds exact duplicates.
				exact, fold := foldDuplicate(top, keys[top.start:], key, bytesOf, &folds)
				if exact {
					facts.dup, facts.dupKey = true, string(key)
					return facts
				}
				facts.foldDup = facts.foldDup || fold
			} else if top.seen != 0 {
				seen := maps[top.seen-1]
				if _, ok := seen[string(key)]; ok {
					facts.dup, facts.dupKey = true, string(key)
					return facts
				}
				seen[string(key)] = struct{}{}
			} else {
				bit := keyBit(key)
				if top.mask&bit != 0 {
					for _, o := range keys[top.start:] {
						if string(bytesOf(o)) == string(key) {
							facts.dup, facts.dupKey = true, string(key)
							return facts
						}
					}
				}
				top.mask |= bit
				if len(keys)-top.start+1 > manyKeys {
					seen := make(map[string]struct{}, 2*manyKeys)
					for _, o := range keys[top.start:] {
						seen[string(bytesOf(o))] = struct{}{}
					}
					seen[string(key)] = struct{}{}
					maps = append(maps, seen)
					top.seen = len(maps)
				}
			}
			keys = append(keys, ref)
			kind, at = kNone, 0
			if top.kind != kNone {
				at, kind = member(top.kind, key)
			}
			i = skipSpace(b, skipSpace(b, i)+1) // past ':'
		}
	}
}

// foldDuplicate compares key, a new key of the read object top, with its
// earlier keys: exact when one is the same key (after unescaping), fold when
// one is equal to it under Unicode case folding only. ASCII keys are first
// sifted by foldBit; past manyKeys keys the folded keys go to a set in
// folds (folded key → the key).
func foldDuplicate(top *frame, earlier []keyRef, key []byte, bytesOf func(keyRef) []byte, folds *[]map[string]string) (exact, fold bool) {
	if top.fseen != 0 {
		set := (*folds)[top.fseen-1]
		fk := string(appendFolded(nil, key))
		if prev, ok := set[fk]; ok {
			return prev == string(key), prev != string(key)
		}
		set[fk] = string(key)
		return false, false
	}
	ascii := isASCII(key)
	bit := foldBit(key)
	if !ascii || top.fwild || top.fmask&bit != 0 {
		for _, o := range earlier {
			if ob := bytesOf(o); string(ob) == string(key) {
				return true, false
			} else if !fold && bytes.EqualFold(ob, key) {
				fold = true
			}
		}
	}
	top.fmask |= bit
	top.fwild = top.fwild || !ascii
	if len(earlier)+1 > manyKeys {
		set := make(map[string]string, 2*manyKeys)
		for _, o := range earlier {
			ob := bytesOf(o)
			set[string(appendFolded(nil, ob))] = string(ob)
		}
		set[string(appendFolded(nil, key))] = string(key)
		*folds = append(*folds, set)
		top.fseen = len(*folds)
	}
	return false, fold
}

// foldBit is keyBit ignoring ASCII letter case: ASCII keys equal under case
// folding have equal bits. (It says nothing of non-ASCII keys, whose folding
// can change their length: they are compared with every key.)
func foldBit(k []byte) uint64 {
	if len(k) == 0 {
		return 1
	}
	lower := func(c byte) uint {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return uint(c)
	}
	h := uint(len(k))*31 + lower(k[0])
	h = h*31 + lower(k[len(k)/2])
	h = h*31 + lower(k[len(k)-1])
	return 1 << (h & 63)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// appendFolded appends the folded form of the UTF-8 key k: two keys have the
// same folded form exactly when bytes.EqualFold holds (each rune replaced by
// the smallest rune of its Unicode simple-fold orbit, as encoding/json's
// foldName does).
func appendFolded(dst, k []byte) []byte {
	for i := 0; i < len(k); {
		if c := k[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(k[i:])
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		dst = utf8.AppendRune(dst, r)
		i += n
	}
	return dst
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace. Outside strings, a valid document holds no other byte
// <= ' '.
func skipSpace(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' {
		i++
	}
	return i
}

// scalarEnd[c] is true for the bytes that end a number or literal in a valid
// document: whitespace, ',', ']' and '}'.
var scalarEnd = [256]bool{' ': true, '\t': true, '\n': true, '\r': true, ',': true, ']': true, '}': true}

// keyBit is a one-bit summary of a key: equal keys have equal bits, so a key
// whose bit is not yet in an object's mask is not a duplicate there.
func keyBit(k []byte) uint64 {
	if len(k) == 0 {
		return 1
	}
	return 1 << ((uint(len(k)) + 3*uint(k[0]) + 5*uint(k[len(k)-1])) & 63)
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// str reads the string whose opening quote is b[i] and returns the index
// after its closing quote, whether it holds an escape and whether one of its
// escapes is a lone surrogate.
func str(b []byte, i int) (end int, esc, lone bool) {
	i++
	for {
		// Eight bytes at a time while none is '"' or '\\'.
		for i+8 <= len(b) {
			v := binary.LittleEndian.Uint64(b[i:])
			q, bs := v^('"'*ones), v^('\\'*ones)
			if ((q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
				break
			}
			i += 8
		}
		for b[i] != '"' && b[i] != '\\' {
			i++
		}
		if b[i] == '"' {
			return i + 1, esc, lone
		}
		esc = true
		if b[i+1] == 'u' {
			n, l := surrogateEscape(b, i)
			lone = lone || l
			i += n
		} else {
			i += 2
		}
	}
}
