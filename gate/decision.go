// The workspace authorization decision of an /a2a call or a DataResource
// request (docs/sdk-wire.md, "Bootstrap set" and "Workspace token checks").

package gate

import (
	"context"
	"net/http"
	"slices"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// Verified modes, as sent in X-Supervaize-Verified-Mode.
const (
	verifiedToken     = "token"
	verifiedBootstrap = "bootstrap"
	verifiedLocal     = "local"
)

// decision is the outcome of authorizing one request: allowed (mode set,
// no refusal) or refused (the refusal, answered by the gate's one writer,
// answers.go).
type decision struct {
	mode     string                 // verifiedToken, verifiedBootstrap or verifiedLocal when allowed
	refusal  *refusal.Refusal       // the refusal of a refused request (nil when allowed)
	contract *registration.Contract // the agent's contract, when registration is on
	claims   *grants.Claims         // the verified (token) or local context
	// ws is the one answer to "whose call is this" for what an allowed
	// call binds and is scoped by (its idempotency record, its
	// references): the verified workspace (token), the request's own
	// (local mode, where nothing is verified: localClaims); "" for a
	// bootstrap call, which has none. Set by allow. The limits and the
	// event memory take a verified workspace only (newLimitCall,
	// rememberRequest): a workspace the client names is never a limits key.
	ws string
	// intro and introCache: the introspection outcome and how it was known
	// ("" when not introspected; introspection.go, introspectDecision).
	intro, introCache string
}

// allowed reports whether d allows the request: a mode and no refusal (a
// decision without a mode is never an allowance).
func (d decision) allowed() bool { return d.mode != "" && d.refusal == nil }

// refused is d's refusal; a decision neither allowed nor carrying one
// (none is built) is refused all the same, as an internal failure.
func (d decision) refused() *refusal.Refusal {
	if d.refusal == nil {
		return grants.Refusal("internal", "authorization failed", "decision without an outcome")
	}
	return d.refusal
}

// allow is an allowed decision of mode for claims: the only way one is
// built, so every allowed decision carries its ws.
func allow(mode string, claims *grants.Claims) decision {
	d := decision{mode: mode, claims: claims}
	if claims != nil {
		d.ws = claims.WorkspaceID
	}
	return d
}

// deny is the decision refusing with err: its refusal (grants,
// registration), else an internal failure refused as a workspace
// authorization one.
func deny(err error) decision {
	if rf := refusal.As(err); rf != nil {
		return decision{refusal: rf}
	}
	return decision{refusal: grants.Refusal("internal", "authorization failed", err.Error())}
}

// decideCall is the workspace authorization decision for a parsed /a2a call
// (docs/sdk-wire.md, "Bootstrap set" and "Workspace token checks"),
// taken after the transport key and the envelope were accepted. The rules,
// in order:
//  1. bootstrap action or surface: allowed without a token.
//  2. local mode: allowed with a local context ("local-mode" grant, the
//     request's workspace, exactly the scopes the call needs).
//  3. verification not enabled outside local mode: workspace_authorization_not_configured.
//  4. the token verifies (grants.Verifier.Verify) and covers the call
//     (grants.Authorize: agent, workspace, method + target scopes). When
//     it was verified already, before the body was read (bodyOwner: early),
//     a settled refusal of that check is given again, anything else is
//     checked again, unobserved (the verified-token cache answers a valid
//     token); earlyToken{}: no early check.
//  5. when a registration source is on, the agent's contract allows it
//     (decideContract): bootstrap calls too must be declared.
//  6. with introspection on, a covered target's token is still active
//     (introspectDecision).
//
// a records the call and the decision (recordDecision).
func (g *Gate) decideCall(ctx context.Context, call *jsonrpc.Call, early earlyToken, a *audit) decision {
	a.target, a.agentSlug, a.workspaceID = call.Target(), call.AgentSlug, call.WorkspaceID
	d := g.decideAuth(ctx, call, early)
	if d.allowed() && g.contracts != nil {
		d = g.decideContract(call, d)
	}
	d = g.introspectDecision(ctx, call.Target(), early.token, g.uncarriable(d))
	a.recordDecision(d)
	return d
}

// decideAuth is rules 1-4 of decideCall.
func (g *Gate) decideAuth(ctx context.Context, call *jsonrpc.Call, early earlyToken) decision {
	var bootstrap bool
	var scopes []string // can stay on the stack: localClaims copies it
	if call.IsAction() {
		bootstrap = grants.IsBootstrapAction(call.Action)
		scopes = grants.ActionScopes(call.Action)
	} else {
		bootstrap = grants.IsBootstrapSurface(call.Surface)
		scopes = grants.SurfaceScopes(call.Surface)
	}
	if bootstrap || g.mode == ModeLocal {
		// No token to bind the call to an agent: the slug must at least be
		// one this sidecar serves (when agents are configured).
		if _, served := g.agents[call.AgentSlug]; len(g.agents) > 0 && !served {
			if bootstrap {
				return notRegistered(call)
			}
			return decision{refusal: grants.Refusal(grants.CodeUnknownAgent, grants.PrefixUnknownAgent+call.AgentSlug,
				"agent not served here (no token checked)")}
		}
	}
	if bootstrap {
		return allow(verifiedBootstrap, nil)
	}
	switch g.mode {
	case ModeLocal:
		return allow(verifiedLocal, g.localClaims(call, scopes))
	case ModeNotConfigured:
		return decision{refusal: grants.Refuse(grants.CodeNotConfigured, "")}
	}
	return g.decideToken(ctx, grants.Target{AgentSlug: call.AgentSlug,
		WorkspaceID: call.WorkspaceID, WorkspaceSlug: call.WorkspaceSlug, Scopes: scopes}, early)
}

// notRegistered is the SDK's answer to a bootstrap call for an agent slug
// not served here: no handler is registered for it, so -32010 (action) or
// -32011 (surface) with the SDK's text and data (docs/sdk-wire.md,
// "Bootstrap set").
func notRegistered(call *jsonrpc.Call) decision {
	return decision{refusal: registration.NotRegistered(call.AgentSlug, call.IsAction(), call.Target(),
		"bootstrap call for an agent not served here")}
}

// decideData is the decision for a DataResource route: a workspace token is
// always required, local mode included (docs/sdk-wire.md, "Local mode").
// The workspace comes from X-Supervaize-Workspace-Id / -Slug and the agent
// from the path. Taken after the transport key was accepted.
func (g *Gate) decideData(ctx context.Context, rt route, h http.Header) decision {
	if g.verifier == nil {
		return decision{refusal: grants.Refuse(grants.CodeNotConfigured, "")}
	}
	target := grants.Target{AgentSlug: rt.agentSlug, WorkspaceID: h.Get(headerWorkspaceID),
		WorkspaceSlug: h.Get(headerWorkspaceSlug), Scopes: rt.dataScopes()}
	token := earlyToken{token: grants.TokenFromHeader(h.Values(headerWorkspaceAuth))} // no early check: read here
	d := g.uncarriable(g.decideToken(ctx, target, token))
	if g.intro == nil { // no target string to build
		return d
	}
	return g.introspectDecision(ctx, "resource."+rt.resource+"."+rt.operation, token.token, d)
}

// decideToken verifies the token and authorizes it for target. Its callers
// (decideAuth, decideData) run after the transport key was accepted, so a
// call whose target agent is served here may trigger a JWKS refresh for an
// unknown kid (grants.VerifyOptions.RefreshUnknownKID); any other call
// cannot spend the shared refresh budget. early: the token was verified
// (and observed) a moment ago (bodyOwner): a settled refusal is given
// again unverified, anything else checked again, unobserved (an accepted
// token without hashing it again while the cache would answer it:
// grants.Verifier.VerifyAgain).
func (g *Gate) decideToken(ctx context.Context, target grants.Target, early earlyToken) decision {
	if early.ran && grants.Settled(early.err) {
		return deny(early.err)
	}
	_, served := g.agents[target.AgentSlug]
	claims, err := g.verifier.VerifyAgain(ctx, early.token, early.verified,
		grants.VerifyOptions{RefreshUnknownKID: served, Unobserved: early.ran})
	if err != nil {
		return deny(err)
	}
	if err := grants.Authorize(claims, g.agents, target); err != nil {
		d := deny(err)
		d.claims = claims
		return d
	}
	return allow(verifiedToken, claims)
}

// localClaims is the unverified local-mode context (docs/sdk-wire.md,
// "Local mode"): the call's workspace and agent, exactly the scopes it needs.
func (g *Gate) localClaims(call *jsonrpc.Call, scopes []string) *grants.Claims {
	return &grants.Claims{
		GrantID:       "local-mode",
		WorkspaceID:   call.WorkspaceID,
		WorkspaceSlug: call.WorkspaceSlug,
		AgentSlug:     call.AgentSlug,
		AgentID:       g.agents[call.AgentSlug],
		ServerID:      g.serverID,
		Scopes:        slices.Clone(scopes), // its own copy: scopes may be on the caller's stack
	}
}
