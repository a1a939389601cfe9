package introspection

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// call makes one introspection request (RFC 7662 §2.1) and parses its
// answer (§2.2). Every error wraps ErrUnavailable and names neither the
// token nor the client secret.
func (c *Client) call(ctx context.Context, token string) (answer, error) {
	start := time.Now()
	a, err := c.roundTrip(ctx, token)
	result := "error"
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	case a.active:
		result = "active"
	default:
		result = "inactive"
	}
	c.record(err)
	if c.cfg.Observe != nil {
		c.cfg.Observe(result, time.Since(start))
	}
	return a, err
}

func (c *Client) roundTrip(ctx context.Context, token string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL,
		strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		return answer{}, errors.New("bad introspection url")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	switch {
	case c.cfg.Bearer != "":
		req.Header.Set("Authorization", "Bearer "+c.cfg.Bearer)
	case c.cfg.ClientID != "":
		// RFC 6749 §2.3.1: each part form-encoded, then Basic.
		req.SetBasicAuth(url.QueryEscape(c.cfg.ClientID), url.QueryEscape(c.cfg.ClientSecret))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return answer{}, errors.New("timeout")
		}
		var ue *url.Error
		if errors.As(err, &ue) { // the URL is configuration, not a secret; the error's text may be long
			return answer{}, fmt.Errorf("transport: %v", redact.Error(ue.Err))
		}
		return answer{}, errors.New("transport error")
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return answer{}, errors.New("timeout")
		}
		return answer{}, errors.New("reading the answer failed")
	}
	if resp.StatusCode != http.StatusOK {
		return answer{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	if len(body) > MaxResponseBytes {
		return answer{}, errors.New("answer too large")
	}
	return parse(body)
}

// parse reads an RFC 7662 answer: exactly one JSON object (no duplicate
// key) whose "active" is a boolean; grant_id, workspace_id and scope, when
// present and not null, must be strings.
func parse(body []byte) (answer, error) {
	malformed := errors.New("malformed answer")
	if !jsonrpc.IsJSONObject(body) {
		return answer{}, malformed
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return answer{}, malformed
	}
	var a answer
	switch string(bytes.TrimSpace(m["active"])) {
	case "true":
		a.active = true
	case "false":
	default:
		return answer{}, malformed
	}
	for name, dst := range map[string]**string{"grant_id": &a.grantID, "workspace_id": &a.workspaceID, "scope": &a.scope} {
		raw, ok := m[name]
		if !ok || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return answer{}, malformed
		}
		*dst = &s
	}
	return a, nil
}

// sameScopes reports whether the space-separated scope string holds
// exactly the scopes of want (as sets).
func sameScopes(scope string, want []string) bool {
	got := strings.Fields(scope)
	slices.Sort(got)
	got = slices.Compact(got)
	w := slices.Clone(want)
	slices.Sort(w)
	w = slices.Compact(w)
	return slices.Equal(got, w)
}
