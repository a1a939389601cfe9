package registration

import (
	"bytes"
	"fmt"
	"strings"
)

// V2ExtensionName is the name of the Supervaizer v2 Agent Card extension.
const V2ExtensionName = "supervaizer.v2"

// FromAgentCard extracts and parses the supervaizer.v2 extension of an A2A
// Agent Card (seed protocol-support, "Supervaizer v2 Agent Card Extension";
// seed "Supervaizer v2", Registration: "exposed in the A2A Agent Card under
// supervaizer.v2").
//
// Placements read, in this order:
//
//  1. card.supervaizer.v2: a "supervaizer" object holding a "v2" object.
//     This is what the Python SDK writes (create_agent_card).
//  2. card["supervaizer.v2"]: a top-level key spelled with the dot.
//  3. card.extensions["supervaizer.v2"] when "extensions" is an object, or,
//     when it is an array of A2A AgentExtension objects, the "params" object
//     of the entry whose "uri" is "supervaizer.v2" or ends with
//     "/supervaizer.v2" or ":supervaizer.v2".
//  4. card.capabilities.extensions, read like 3 (the A2A AgentCapabilities
//     placement).
//
// When several placements are present they must be identical (same
// canonical JSON); otherwise the card is refused as ambiguous. The card's own
// "name" and "version" strings are kept in Registration.Card.
//
// Errors: invalid JSON or duplicate keys anywhere in the card; a top level
// that is not an object; "supervaizer", "extensions", "capabilities", "name"
// or "version" of the wrong JSON type; a matching A2A extension entry without
// a params object; conflicting placements; a wrapped ErrNoV2Extension when
// no placement is present (with a hint when the document is a bare
// registration, which Parse reads); and every error of Parse for the
// extension object, with key paths relative to the card.
func FromAgentCard(card []byte) (*Registration, error) {
	tree, err := decodeStrict(card)
	if err != nil {
		return nil, fmt.Errorf("agent card: %w", err)
	}
	return fromCardTree(tree)
}

type cardCandidate struct {
	path string
	v    any
}

func fromCardTree(tree any) (*Registration, error) {
	m, ok := tree.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("agent card: expected a JSON object, got %s", jsonType(tree))
	}
	root := obj{m: m, rd: &reader{}}
	var cands []cardCandidate
	sv, _ := root.object("supervaizer")
	if v, ok := sv.get("v2"); ok {
		cands = append(cands, cardCandidate{path: "supervaizer.v2", v: v})
	}
	if v, ok := root.get(V2ExtensionName); ok {
		cands = append(cands, cardCandidate{path: `["supervaizer.v2"]`, v: v})
	}
	cands = append(cands, extensionCandidates(root, "extensions")...)
	caps, _ := root.object("capabilities")
	cands = append(cands, extensionCandidates(caps, "extensions")...)
	name, version := root.str("name", ""), root.str("version", "")
	if root.rd.err != nil {
		return nil, root.rd.err
	}

	if len(cands) == 0 {
		if _, ok := m["supervaizer_contract_version"]; ok {
			return nil, fmt.Errorf("%w: the document looks like a bare registration (it has supervaizer_contract_version at the top level); read it with Parse", ErrNoV2Extension)
		}
		return nil, fmt.Errorf("%w (looked at supervaizer.v2, [\"supervaizer.v2\"], extensions and capabilities.extensions)", ErrNoV2Extension)
	}
	first := canonicalJSON(cands[0].v)
	for _, o := range cands[1:] {
		if !bytes.Equal(first, canonicalJSON(o.v)) {
			return nil, fmt.Errorf("agent card: conflicting supervaizer.v2 extensions at %s and %s", cands[0].path, o.path)
		}
	}

	reg, err := fromTree(cands[0].v, cands[0].path)
	if err != nil {
		return nil, err
	}
	reg.Card = &CardInfo{Name: name, Version: version}
	return reg, nil
}

// extensionCandidates reads o[key] as either an object keyed by extension
// name or an array of A2A AgentExtension objects ({uri, params, ...}).
// Entries that are not ours are ignored whatever their shape.
func extensionCandidates(o obj, key string) []cardCandidate {
	v, ok := o.get(key)
	if !ok {
		return nil
	}
	path := o.at(key)
	switch t := v.(type) {
	case map[string]any:
		if e, ok := t[V2ExtensionName]; ok && e != nil {
			return []cardCandidate{{path: path + `["supervaizer.v2"]`, v: e}}
		}
		return nil
	case []any:
		var out []cardCandidate
		for i, e := range t {
			em, ok := e.(map[string]any)
			if !ok {
				continue
			}
			uri, ok := em["uri"].(string)
			if !ok || !isV2ExtensionURI(uri) {
				continue
			}
			if params := em["params"]; params != nil {
				out = append(out, cardCandidate{path: index(path, i) + ".params", v: params})
			} else {
				o.rd.fail(fmt.Errorf("agent card: extension %q at %q has no params object", uri, index(path, i)))
			}
		}
		return out
	default:
		o.rd.fail(typeError(path, "object or array", v))
		return nil
	}
}

func isV2ExtensionURI(uri string) bool {
	return uri == V2ExtensionName ||
		strings.HasSuffix(uri, "/"+V2ExtensionName) ||
		strings.HasSuffix(uri, ":"+V2ExtensionName)
}
