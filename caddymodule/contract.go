package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/registration"
)

// RegistrationConfig chooses where the agent's v2 contract comes from
// (supervaizer-v2 seed, "Registration"; protocol-support seed, "Agent Card
// extension").
type RegistrationConfig struct {
	// Source is "from_upstream" (default when upstream is set), "file" or "off".
	Source string `json:"source,omitempty"`
	// File is the JSON file read when Source is "file": a registration, an
	// Agent Card, or an object mapping slug → either.
	File string `json:"file,omitempty"`
	// Refresh is the card refresh period (default 60 s).
	Refresh caddy.Duration `json:"refresh,omitempty"`
	// A2AVersions and A2UIVersions are the accepted protocol versions
	// (defaults 0.2.6 and v0.8, the versions the seeds pin).
	A2AVersions  []string `json:"a2a_versions,omitempty"`
	A2UIVersions []string `json:"a2ui_versions,omitempty"`
}

// registrationSource validates the registration settings and returns the
// source kind ("from_upstream" or "file"), or "" when registration is off
// (notEnforced: off only because no upstream is set).
//
// Errors: an unknown source; file without a path; from_upstream without an
// upstream (named by the error); no agent configured while a source is on;
// an upstream that is not an http(s) URL.
func (h *Handler) registrationSource(g *gate) (src string, notEnforced bool, err error) {
	rc := h.Registration
	if rc == nil {
		rc = &RegistrationConfig{}
	}
	src = rc.Source
	if src == "" {
		if h.Upstream == "" {
			return "", true, nil
		}
		src = "from_upstream"
	}
	switch src {
	case "off":
		return "", false, nil
	case "from_upstream":
		if h.Upstream == "" {
			return "", false, errors.New("supervaizer_auth: registration from_upstream needs upstream <url> (the agent's base URL, e.g. http://127.0.0.1:8000)")
		}
		if _, err := h.upstreamURL("registration from_upstream"); err != nil {
			return "", false, err
		}
	case "file":
		if rc.File == "" {
			return "", false, errors.New("supervaizer_auth: registration file needs a path")
		}
	default:
		return "", false, fmt.Errorf("supervaizer_auth: registration must be from_upstream, file or off, not %q", src)
	}
	if len(g.agents) == 0 {
		return "", false, fmt.Errorf("supervaizer_auth: registration %s needs at least one agent <slug> line", src)
	}
	return src, false, nil
}

// upstreamURL returns the upstream setting without a trailing slash, for
// the setting named by who. Errors: no upstream (naming who needs it), or
// one that is not an http(s) URL with a host.
func (h *Handler) upstreamURL(who string) (string, error) {
	if h.Upstream == "" {
		return "", fmt.Errorf("supervaizer_auth: %s needs upstream <url> (the agent's base URL, e.g. http://127.0.0.1:8000)", who)
	}
	u, err := url.Parse(h.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("supervaizer_auth: upstream %q must be an http(s) URL", redactURL(h.Upstream))
	}
	return strings.TrimRight(h.Upstream, "/"), nil
}

// checkRegistrationSettings reports what registrationSource refuses, without
// starting a source.
func (h *Handler) checkRegistrationSettings(g *gate) error {
	_, _, err := h.registrationSource(g)
	return err
}

// provisionRegistration validates the settings, then builds and starts the
// contract source (none when off). Errors: those of registrationSource, and
// a source that cannot be built (e.g. a bad slug).
func (h *Handler) provisionRegistration(g *gate, log *zap.Logger) error {
	src, notEnforced, err := h.registrationSource(g)
	if err != nil {
		return err
	}
	if notEnforced {
		log.Warn("registration not enforced: set upstream (the agent's base URL) or registration file <path> to refuse undeclared actions and surfaces")
	}
	if src == "" {
		return nil
	}
	rc := h.Registration
	if rc == nil {
		rc = &RegistrationConfig{}
	}
	slugs := make([]string, 0, len(g.agents))
	for slug := range g.agents {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	accepted := registration.AcceptedVersions{A2A: rc.A2AVersions, A2UI: rc.A2UIVersions}
	onChange := func(slug string, c registration.Change, oldFP, newFP string) {
		kind := c.Kind.String()
		if oldFP == "" { // the first load of the contract: nothing changed
			kind = "initial"
		}
		g.metrics.contractChange(kind)
	}
	onFetch := func(slug string, err error) { g.metrics.registrationFetch(err) }
	var s *registration.Source
	if src == "from_upstream" {
		s, err = registration.NewUpstreamSource(registration.UpstreamOptions{
			BaseURL: h.Upstream, Slugs: slugs, RefreshInterval: time.Duration(rc.Refresh),
			Accepted: accepted, Logger: log.Named("registration"), OnChange: onChange, OnFetch: onFetch,
		})
	} else {
		s, err = registration.NewFileSource(rc.File, slugs, registration.FileOptions{
			RefreshInterval: time.Duration(rc.Refresh), Accepted: accepted,
			Logger: log.Named("registration"), OnChange: onChange, OnFetch: onFetch,
		})
	}
	if err != nil {
		return fmt.Errorf("supervaizer_auth: registration: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		return fmt.Errorf("supervaizer_auth: registration: %w", err)
	}
	g.contracts, g.stopContracts = s, cancel
	return nil
}
