// B-ctx: plain Caddy reverse_proxy (site B, the same process and global
// options) where the bench client itself sends the ten
// X-Supervaize-Verified-* headers that C's gate injects. Their names and
// values are captured from what the bench agent receives through C, once
// at start-up, and the agent's whole header set from B-ctx is then checked
// against C's: C − B-ctx is the gate's cost net of carrying the ten
// headers through Caddy's reverse_proxy and Go's transport (Header.Clone,
// sorting and writing them, and the garbage they make).

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// scenBCtx is the scenario's name; it is served by site B.
const scenBCtx = "B-ctx"

// bctxLabel says what C − B-ctx is, beside C/B in the like-with-like
// section and the JSON.
const bctxLabel = "the gate's cost net of carrying the ten headers " +
	"(client → proxy bytes differ: B-ctx's client sends the ten headers beside the token, C's the token only)"

// verifiedHeaderPrefix starts the name of each header the gate injects
// (gate/verifiedcontext.go, injectVerified), and verifiedHeaderCount is how many it
// injects for the bench token (the mode and nine claims, gate/verifiedcontext.go).
const (
	verifiedHeaderPrefix = "X-Supervaize-Verified-"
	verifiedHeaderCount  = 10
)

// siteSpecificHeaders differ between two sites of one process by
// construction (the site's own port), so the header-set check skips them.
var siteSpecificHeaders = []string{"X-Forwarded-Host"}

// wantBCtx reports whether the run includes B-ctx (every run by default).
func (e *env) wantBCtx() bool { return e.cfg.only == nil || e.cfg.only[scenBCtx] }

// bctxScenario is B's request to site B, plus the captured headers.
func (e *env) bctxScenario() scenario {
	return scenario{name: scenBCtx, desc: "plain reverse_proxy, the client sends the 10 verified headers", site: siteB,
		body: e.bodySync, tokens: []string{"Bearer " + e.tokenOne}, headers: e.ctxHeaders, forwards: true, check: forwardedOK}
}

// primeBCtx captures the verified headers the agent receives through C
// (C's load request, sent once), keeps them for B-ctx, then sends B-ctx's
// load request once and requires that the agent received the same header
// set as from C (siteSpecificHeaders aside).
func (e *env) primeBCtx() error {
	c := scenario{name: siteC, site: siteC, body: e.bodySync, tokens: []string{"Bearer " + e.tokenOne}, check: forwardedOK}
	fromC, err := e.captureHeaders(c)
	if err != nil {
		return fmt.Errorf("B-ctx: capturing C's headers: %w", err)
	}
	if e.ctxHeaders, err = verifiedSet(fromC); err != nil {
		return fmt.Errorf("B-ctx: %w", err)
	}
	fromB, err := e.captureHeaders(e.bctxScenario())
	if err != nil {
		return fmt.Errorf("B-ctx: capturing B-ctx's headers: %w", err)
	}
	if d := headerSetDiff(fromC, fromB, siteSpecificHeaders...); len(d) > 0 {
		return fmt.Errorf("B-ctx: the agent's header set differs from C's: %s", strings.Join(d, "; "))
	}
	fmt.Printf("B-ctx: the client sends the %d verified headers the agent receives from C (%d bytes); the agent's header set from B-ctx = C's\n",
		len(e.ctxHeaders), headerBytes(e.ctxHeaders))
	return nil
}

// captureHeaders arms the bench agent's capture, sends one request of s
// exactly as the load does (loadClient, loadRun.request), and returns the
// request headers the agent received.
func (e *env) captureHeaders(s scenario) (http.Header, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	capURL := "http://" + e.upstreamAddr + "/_bench/capture"
	resp, err := http.Post(capURL, "text/plain", nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return nil, fmt.Errorf("arming the capture: %d", resp.StatusCode)
	}
	client, tr := loadClient(1)
	defer tr.CloseIdleConnections()
	resp, err = client.Do(newLoadRun(client, e.url(s.site, "/a2a"), s).request(ctx))
	if err != nil {
		return nil, err
	}
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil || !s.check(resp, body.Bytes()) {
		return nil, fmt.Errorf("%s: unexpected answer %d %s (%v)", s.name, resp.StatusCode, body.Bytes(), err)
	}
	if resp, err = http.Get(capURL); err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the capture: %d", resp.StatusCode)
	}
	var h http.Header
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h, err
}

// verifiedSet is the X-Supervaize-Verified-* headers of h (the names as
// received, any letter case of the prefix), or an error unless there are
// exactly verifiedHeaderCount of them, each with one value.
func verifiedSet(h http.Header) (http.Header, error) {
	out := http.Header{}
	for name, v := range h {
		if len(name) >= len(verifiedHeaderPrefix) && strings.EqualFold(name[:len(verifiedHeaderPrefix)], verifiedHeaderPrefix) {
			if len(v) != 1 {
				return nil, fmt.Errorf("%s has %d values, want 1", name, len(v))
			}
			out[name] = slices.Clone(v)
		}
	}
	if len(out) != verifiedHeaderCount {
		return nil, fmt.Errorf("the agent received %d verified headers through C, want %d: %v", len(out), verifiedHeaderCount, slices.Sorted(maps.Keys(out)))
	}
	return out, nil
}

// headerSetDiff lists, by name in order, the headers whose values differ
// between a and b (missing on one side included), skipping ignore.
func headerSetDiff(a, b http.Header, ignore ...string) []string {
	names := map[string]bool{}
	for n := range a {
		names[n] = true
	}
	for n := range b {
		names[n] = true
	}
	var out []string
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if slices.Contains(ignore, n) || slices.Equal(a[n], b[n]) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %q vs %q", n, a[n], b[n]))
	}
	return out
}

// headerBytes is the size of h's header lines on the wire in HTTP/1.1
// ("Name: value\r\n" each).
func headerBytes(h http.Header) int {
	n := 0
	for name, vs := range h {
		for _, v := range vs {
			n += len(name) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}
