package registration

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// allowSource is a file source serving reg for fixtureSlug, refreshed once
// (accepted: the versions it accepts; zero: the defaults).
func allowSource(t *testing.T, reg []byte, accepted AcceptedVersions) *Source {
	t.Helper()
	path := filepath.Join(t.TempDir(), "registration.json")
	writeFileAtomic(t, path, reg)
	src, err := NewFileSource(path, []string{fixtureSlug}, FileOptions{Accepted: accepted})
	if err != nil {
		t.Fatal(err)
	}
	_ = src.Refresh(context.Background(), fixtureSlug)
	return src
}

// TestAllow: the contract's answer to an authorized call, with the SDK's
// code, JSON-RPC code, text and data for each refusal, in the order the
// request path applies them (contract, declaration, workspace binding).
func TestAllow(t *testing.T) {
	reg := fixtureRaw(t)
	c := mustParse(t, reg)
	action, surface := NewContract(c).ActionIDs()[0], NewContract(c).SurfaceIDs()[0]
	bound := edited(t, reg, func(m map[string]any) { m["workspace_binding"] = map[string]any{"required": true} })
	plain, binding := allowSource(t, reg, AcceptedVersions{}), allowSource(t, bound, AcceptedVersions{})
	oldA2A := allowSource(t, reg, AcceptedVersions{A2A: []string{"9.9"}})

	for _, tc := range []struct {
		name string
		src  *Source
		slug string
		call Call
		want *refusal.Refusal // nil: allowed
	}{
		{"declared action", plain, fixtureSlug, Call{Action: true, ID: action, Token: true}, nil},
		{"declared surface", plain, fixtureSlug, Call{ID: surface, Token: true}, nil},
		{"undeclared action", plain, fixtureSlug, Call{Action: true, ID: "job.nope", Token: true},
			&refusal.Refusal{Status: http.StatusNotFound, Code: "action_not_registered", RPCCode: jsonrpc.CodeActionNotRegistered,
				Message: "Action handler not registered: job.nope",
				Data:    map[string]any{"agent_slug": fixtureSlug, "action": "job.nope"}}},
		{"undeclared surface", plain, fixtureSlug, Call{ID: "nope", Token: true},
			&refusal.Refusal{Status: http.StatusNotFound, Code: "surface_not_registered", RPCCode: jsonrpc.CodeSurfaceNotRegistered,
				Message: "Surface handler not registered: nope",
				Data:    map[string]any{"agent_slug": fixtureSlug, "surface": "nope"}}},
		{"an action id is not a surface", plain, fixtureSlug, Call{ID: action},
			&refusal.Refusal{Status: http.StatusNotFound, Code: "surface_not_registered", RPCCode: -32011, Message: "Surface handler not registered: " + action,
				Data: map[string]any{"agent_slug": fixtureSlug, "surface": action}}},
		{"slug not configured", plain, "other_agent", Call{Action: true, ID: action},
			&refusal.Refusal{Status: http.StatusForbidden, RPCCode: jsonrpc.CodeWorkspaceAuthorization, Code: CodeAgentContractUnavailable, Message: `agent "other_agent" is not configured in this sidecar`}},
		{"versions not accepted", oldA2A, fixtureSlug, Call{Action: true, ID: action},
			&refusal.Refusal{Status: http.StatusForbidden, RPCCode: jsonrpc.CodeWorkspaceAuthorization, Code: CodeContractVersionUnsupported, Message: `agent "agent_interviewer" declares a2a_version "0.2.6"; accepted: "9.9"`}},
		{"binding required, token without ref", binding, fixtureSlug, Call{Action: true, ID: action, Token: true},
			&refusal.Refusal{Status: http.StatusForbidden, RPCCode: jsonrpc.CodeWorkspaceAuthorization, Code: "workspace_binding_missing", Message: "Workspace is authorized in Studio but has no agent-side workspace binding."}},
		{"binding required, token with ref", binding, fixtureSlug, Call{Action: true, ID: action, Token: true, AgentWorkspaceRef: "ws-1"}, nil},
		{"binding required, no token (bootstrap or local)", binding, fixtureSlug, Call{Action: true, ID: action}, nil},
		{"undeclared wins over the binding", binding, fixtureSlug, Call{Action: true, ID: "job.nope", Token: true},
			&refusal.Refusal{Status: http.StatusNotFound, Code: "action_not_registered", RPCCode: -32010, Message: "Action handler not registered: job.nope",
				Data: map[string]any{"agent_slug": fixtureSlug, "action": "job.nope"}}},
	} {
		got, err := tc.src.Allow(tc.slug, tc.call)
		if tc.want == nil {
			if err != nil || got == nil {
				t.Errorf("%s: %v, %v; want the contract", tc.name, got, err)
			}
			continue
		}
		var re *refusal.Refusal
		if got != nil || !errors.As(err, &re) || !reflect.DeepEqual(re, tc.want) {
			t.Errorf("%s: %v, %#v; want %#v", tc.name, got, err, tc.want)
		}
	}
}

// TestAllowBeforeTheFirstRead: a source that has read no card yet refuses
// every call agent_contract_unavailable, bootstrap calls included.
func TestAllowBeforeTheFirstRead(t *testing.T) {
	src, err := NewFileSource(filepath.Join(t.TempDir(), "absent.json"), []string{fixtureSlug}, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.Allow(fixtureSlug, Call{Action: true, ID: "job.start"})
	wantCode(t, err, CodeAgentContractUnavailable)
}
