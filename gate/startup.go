// What start-up says about a configuration besides refusing it: the
// refusal of token mode without agents and the warnings about ignored or
// unsafe settings (README, "Start-up refuses" and "Start-up warns").

package gate

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"
)

// EnvValue is an environment variable's name and value.
type EnvValue struct{ Name, Value string }

// StartupChecks runs the start-up rules that need the resolved settings
// (called by caddymodule's build once the mode is known: envKey is the
// API key environment variable), records the effective settings in
// g.Settings (Settings), and logs a warning for each
// setting that is ignored or cannot work. It returns the problems that
// refuse start-up, each naming its setting:
//   - token mode (workspace_auth required) with no `agent` line: every call
//     would fail workspace_authorization_unknown_agent. Studio agent ids come
//     from Studio's server registration, never from the agent's card
//     (registration/model.go: the card's agent.id defaults to the slug), so
//     no flow can supply them later.
//
// Warnings (zap Warn, which `supervaizer check` lists):
//   - an agent without a Studio id in token mode (its calls fail
//     workspace_authorization_agent_not_registered; bootstrap calls work);
//   - $SUPERVAIZER_API_KEY set but ignored because api_key lines exist and
//     none of them is that key;
//   - no write-scope API key: every /a2a call and /_sidecar/refresh is 403;
//   - a server_id of sdkServerIDMinLen characters or fewer: the sidecar works,
//     but a Supervaizer SDK 1.8.0 agent given the same id drops it for a
//     random one, so every token it checks again fails wrong_audience
//     (docs/sdk-wire.md).
func (c *Config) StartupChecks(g *Gate, log *zap.Logger, ra *ResolvedAuth, envKey EnvValue) []error {
	var errs []error
	if g.Mode == ModeToken && len(g.Agents) == 0 {
		errs = append(errs, errors.New("supervaizer_auth: workspace_auth required but no agent configured: "+
			"add `agent <slug> <studio_agent_id>` for each agent served here "+
			"(without it every call fails workspace_authorization_unknown_agent)"))
	}
	if g.Mode == ModeToken {
		var noID []string
		for slug, id := range g.Agents {
			if id == "" {
				noID = append(noID, slug)
			}
		}
		sort.Strings(noID)
		if len(noID) > 0 {
			log.Warn("agent without a Studio agent id: its token calls fail workspace_authorization_agent_not_registered " +
				"until you set `agent <slug> <studio_agent_id>`: " + strings.Join(noID, ", "))
		}
	}
	WarnPlaceholderAgents(g, log) // checkonly.go
	if envKey.Value != "" && len(c.APIKeys) > 0 {
		used := false
		for _, k := range c.APIKeys {
			used = used || k.Key == envKey.Value
		}
		if !used {
			log.Warn("$" + envKey.Name + " is set but ignored: api_key lines are configured and none is that key " +
				"(add `api_key {$" + envKey.Name + "} write` to keep accepting it)")
		}
	}
	if len(g.Keys) > 0 {
		write := false
		for _, k := range g.Keys {
			write = write || k.Write
		}
		if !write {
			log.Warn("no write-scope API key: every /a2a call and POST /_sidecar/refresh will be refused 403 Insufficient scope " +
				"(give one api_key the write scope)")
		}
	}
	if n := utf8.RuneCountInString(g.ServerID); n > 0 && n <= sdkServerIDMinLen {
		log.Warn(fmt.Sprintf("server_id %q has %d characters: a Supervaizer SDK 1.8.0 agent ignores a SUPERVAIZER_SERVER_ID "+
			"of %d characters or fewer and makes up a random id, so the tokens this sidecar accepts and passes on fail "+
			"wrong_audience at the agent; give the sidecar and the agent a server_id of %d characters or more",
			g.ServerID, n, sdkServerIDMinLen, sdkServerIDMinLen+1))
	}
	g.Settings = c.Settings(g, ra) // settings.go
	return errs
}

// sdkServerIDMinLen: Supervaizer SDK 1.8.0 uses SUPERVAIZER_SERVER_ID only
// when it is longer than this many characters (docs/sdk-wire.md).
const sdkServerIDMinLen = 5
