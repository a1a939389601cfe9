// What an allowed /a2a call records for the event filter: its request_id's
// workspace, in the server id's events.Memory.

package gate

import "github.com/supervaize/supervaizer-sidecar/jsonrpc"

// rememberForEvents records, for a token-verified call about to reach the
// agent, which workspace its request_id belongs to (replays and refusals
// never reach the agent, so they are not remembered).
func (g *Gate) rememberForEvents(d decision, call *jsonrpc.Call) {
	if d.mode == verifiedToken {
		g.requests.Remember(call.RequestID, d.claims.WorkspaceID)
	}
}
