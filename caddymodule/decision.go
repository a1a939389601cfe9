package caddymodule

import (
	"context"
	"errors"
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// Verified modes, as sent in X-Supervaize-Verified-Mode.
const (
	verifiedToken     = "token"
	verifiedBootstrap = "bootstrap"
	verifiedLocal     = "local"
)

// decision is the outcome of authorizing one request.
type decision struct {
	allow  bool
	mode   string         // verifiedToken, verifiedBootstrap or verifiedLocal when allowed
	claims *grants.Claims // the verified (token) or local context
	code   string         // the data.code (or reason) of a denial, for answers and the audit line
	msg    string         // the denial message
}

func deny(err error) decision {
	var ge *grants.Error
	if errors.As(err, &ge) {
		return decision{code: ge.Code, msg: ge.Message}
	}
	return decision{code: "internal", msg: "authorization failed"}
}

// decideCall is the workspace authorization decision for a parsed /a2a call
// (sdk-wire-behavior.md, "Bootstrap set" and "Workspace token checks"),
// taken after the transport key and the envelope were accepted. The rules,
// in order:
//  1. bootstrap action or surface: allowed without a token.
//  2. local mode: allowed with a local context ("local-mode" grant, the
//     request's workspace, exactly the scopes the call needs).
//  3. verification not enabled outside local mode: workspace_authorization_not_configured.
//  4. the token verifies (grants.Verifier.Verify) and covers the call
//     (grants.Authorize: agent, workspace, method + target scopes).
func (g *gate) decideCall(ctx context.Context, call *jsonrpc.Call, tokenValues []string) decision {
	var scopes []string
	if call.IsAction() {
		if grants.IsBootstrapAction(call.Action) {
			return decision{allow: true, mode: verifiedBootstrap}
		}
		scopes = grants.ActionScopes(call.Action)
	} else {
		if grants.IsBootstrapSurface(call.Surface) {
			return decision{allow: true, mode: verifiedBootstrap}
		}
		scopes = grants.SurfaceScopes(call.Surface)
	}
	target := grants.Target{AgentSlug: call.AgentSlug, WorkspaceID: call.WorkspaceID,
		WorkspaceSlug: call.WorkspaceSlug, Scopes: scopes}
	switch g.mode {
	case modeLocal:
		return decision{allow: true, mode: verifiedLocal, claims: g.localClaims(target)}
	case modeNotConfigured:
		return decision{code: grants.CodeNotConfigured,
			msg: "Workspace authorization is not configured on this server"}
	}
	return g.decideToken(ctx, tokenValues, target)
}

// decideData is the decision for a DataResource route: a workspace token is
// always required, local mode included (sdk-wire-behavior.md, "Local mode").
// The workspace comes from X-Supervaize-Workspace-Id / -Slug and the agent
// from the path.
func (g *gate) decideData(ctx context.Context, rt route, h http.Header) decision {
	if g.verifier == nil {
		return decision{code: grants.CodeNotConfigured,
			msg: "Workspace authorization is not configured on this server"}
	}
	target := grants.Target{AgentSlug: rt.agentSlug, WorkspaceID: h.Get(headerWorkspaceID),
		WorkspaceSlug: h.Get(headerWorkspaceSlug), Scopes: rt.dataScopes()}
	return g.decideToken(ctx, h.Values(headerWorkspaceAuth), target)
}

// decideToken verifies the token and authorizes it for target.
func (g *gate) decideToken(ctx context.Context, tokenValues []string, target grants.Target) decision {
	claims, err := g.verifier.Verify(ctx, grants.TokenFromHeader(tokenValues))
	if err != nil {
		return deny(err)
	}
	if err := grants.Authorize(claims, g.agents, target); err != nil {
		d := deny(err)
		d.claims = claims
		return d
	}
	return decision{allow: true, mode: verifiedToken, claims: claims}
}

// localClaims is the unverified local-mode context (sdk-wire-behavior.md,
// "Local mode").
func (g *gate) localClaims(t grants.Target) *grants.Claims {
	return &grants.Claims{
		GrantID:       "local-mode",
		WorkspaceID:   t.WorkspaceID,
		WorkspaceSlug: t.WorkspaceSlug,
		AgentSlug:     t.AgentSlug,
		AgentID:       g.agents[t.AgentSlug],
		ServerID:      g.serverID,
		Scopes:        t.Scopes,
	}
}
