package registration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// Source defaults.
const (
	DefaultRefreshInterval = 60 * time.Second
	DefaultInitialBackoff  = 500 * time.Millisecond
	DefaultFetchTimeout    = 5 * time.Second
	DefaultMaxBodyBytes    = 1 << 20 // 1 MiB
)

// UpstreamOptions configures NewUpstreamSource. Zero values take the
// defaults given on each field.
type UpstreamOptions struct {
	// BaseURL is the agent upstream, e.g. "http://127.0.0.1:8000": scheme
	// http or https, a host, optionally a path prefix; no query or fragment.
	// Cards are read from {BaseURL}/.well-known/agents/{slug}_agent.json (the
	// SDK's unversioned card route, seed protocol-support "Agent Cards").
	BaseURL string
	// Slugs are the agent slugs this sidecar serves: non-empty, unique, no
	// '/', whitespace or control characters.
	Slugs []string
	// RefreshInterval is the time between successful fetches of one slug's
	// card. Default 60 s.
	RefreshInterval time.Duration
	// Client fetches the cards. Default: a client with a 5 s timeout that
	// does not follow redirects (a 3xx answer is a failed fetch).
	Client *http.Client
	// InitialBackoff is the wait after a first failed fetch; it doubles after
	// each further failure up to RefreshInterval, and resets on success.
	// Default 500 ms.
	InitialBackoff time.Duration
	// MaxBodyBytes bounds a card; a larger card is a failed fetch. Default
	// 1 MiB.
	MaxBodyBytes int64
	// Accepted are the protocol versions accepted (see CheckVersions); empty
	// lists mean the defaults.
	Accepted AcceptedVersions
	// Logger receives load, change and failure logs. Default: no logging.
	Logger *zap.Logger
	// OnChange, when set, is called after a new contract was installed for
	// slug: on the first load (oldFP "", Change{Kind: ChangeInitial} without
	// differences) and whenever the fingerprint changes. Fingerprints are 64 hex characters.
	// Callbacks run on the fetching goroutine while that slug's fetches are
	// serialized: they must return quickly and must not call Refresh for the
	// same slug (it would wait for itself).
	OnChange func(slug string, c Change, oldFP, newFP string)
	// OnFetch, when set, is called after every fetch attempt of slug that
	// was not cut short by its context, with its error (nil on success,
	// including "unchanged"). Same constraints as OnChange.
	OnFetch func(slug string, err error)
}

// FileOptions configures NewFileSource; the fields mean what they mean in
// UpstreamOptions (MaxBodyBytes bounds the file).
type FileOptions struct {
	RefreshInterval time.Duration
	InitialBackoff  time.Duration
	MaxBodyBytes    int64
	Accepted        AcceptedVersions
	Logger          *zap.Logger
	OnChange        func(slug string, c Change, oldFP, newFP string)
	OnFetch         func(slug string, err error)
}

// SlugStatus is the state of one configured agent slug, for an admin
// endpoint. Times are wall-clock; zero times are omitted from JSON.
type SlugStatus struct {
	Slug  string `json:"slug"`
	Ready bool   `json:"ready"` // a contract is installed
	// Fingerprint of the installed contract, "" before the first load.
	Fingerprint string `json:"fingerprint,omitempty"`
	// LastChange is the last installed change (first load included).
	LastChange *ChangeRecord `json:"last_change,omitempty"`
	// LastError is the error of the most recent fetch attempt, "" when it
	// succeeded. LastErrorAt is the time of the most recent failure.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// LastFetch is when the most recent attempt ended; LastSuccess when the
	// most recent successful one did.
	LastFetch           time.Time `json:"last_fetch,omitzero"`
	LastSuccess         time.Time `json:"last_success,omitzero"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
}

// ChangeRecord is one installed contract change.
type ChangeRecord struct {
	Kind           ChangeKind `json:"kind"`
	Differences    []string   `json:"differences"`
	OldFingerprint string     `json:"old_fingerprint,omitempty"`
	NewFingerprint string     `json:"new_fingerprint"`
	At             time.Time  `json:"at"`
}

// Source keeps the current Contract of each configured agent slug, read from
// the agent's Agent Card over HTTP (NewUpstreamSource) or from a file
// (NewFileSource). It is plain Go: the owner calls Start and Close. All
// methods are safe for concurrent use; Contract is lock-free.
//
// A fetch installs a new contract only when the card parses, declares the
// configured agent_slug and passes CheckVersions; otherwise the previous
// contract (if any) stays in place and the failure is logged and reported in
// Status.
type Source struct {
	what     string // "upstream <url>" or "file <path>", for logs
	slugs    []string
	states   map[string]*slugState
	fetch    func(ctx context.Context, slug string) (*Registration, error)
	interval time.Duration
	backoff0 time.Duration
	accepted AcceptedVersions
	logger   *zap.Logger
	onChange func(slug string, c Change, oldFP, newFP string)
	onFetch  func(slug string, err error)

	life    sync.Mutex
	started bool
	closed  atomic.Bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type slugState struct {
	slug     string
	contract atomic.Pointer[Contract]
	// versionErr is set while the agent's card pins protocol versions this
	// sidecar does not accept: calls fail with it instead of using any
	// older contract.
	versionErr atomic.Pointer[refusal.Refusal]
	sem        chan struct{} // one slot: serializes fetch-and-install
	reg        *Registration // installed registration; guarded by sem

	mu      sync.Mutex // guards the fields below
	status  SlugStatus
	lastLog string // last failure logged at warn, to avoid repeating it
}

type commonOptions struct {
	interval, backoff0 time.Duration
	accepted           AcceptedVersions
	logger             *zap.Logger
	onChange           func(string, Change, string, string)
	onFetch            func(string, error)
}

func newSource(what string, slugs []string, o commonOptions) (*Source, error) {
	if len(slugs) == 0 {
		return nil, errors.New("registration: at least one agent slug is required")
	}
	s := &Source{
		what:     what,
		slugs:    slices.Clone(slugs),
		states:   make(map[string]*slugState, len(slugs)),
		interval: o.interval,
		backoff0: o.backoff0,
		accepted: o.accepted.withDefaults(),
		logger:   o.logger,
		onChange: o.onChange,
		onFetch:  o.onFetch,
	}
	if s.interval <= 0 {
		s.interval = DefaultRefreshInterval
	}
	if s.backoff0 <= 0 {
		s.backoff0 = DefaultInitialBackoff
	}
	s.backoff0 = min(s.backoff0, s.interval)
	if s.logger == nil {
		s.logger = zap.NewNop()
	}
	for _, slug := range slugs {
		if err := validSlug(slug); err != nil {
			return nil, err
		}
		if _, dup := s.states[slug]; dup {
			return nil, fmt.Errorf("registration: agent slug %q is configured twice", slug)
		}
		s.states[slug] = &slugState{slug: slug, sem: make(chan struct{}, 1), status: SlugStatus{Slug: slug}}
	}
	return s, nil
}

func validSlug(slug string) error {
	if err := CheckSlug(slug); err != nil {
		return fmt.Errorf("registration: %w", err)
	}
	return nil
}

// CheckSlug is the one rule of an agent slug, for every place that takes
// one (registration sources; config.Config.Validate, config/validate.go): not
// empty, and one path segment of every route that names it
// (/.well-known/agents/<slug>_agent.json, /api/agents/<slug>/...), so no
// '/', '\\', '?', '#', space or control character.
func CheckSlug(slug string) error {
	if slug == "" {
		return errors.New("empty agent slug")
	}
	for _, r := range slug {
		if r == '/' || r == '\\' || r == '?' || r == '#' || r <= ' ' || r == 0x7f {
			return fmt.Errorf("agent slug %q contains a '/', '\\', '?', '#', space or control character: it could never be one path segment", slug)
		}
	}
	return nil
}

// NewUpstreamSource returns a Source that reads each slug's Agent Card with
// GET {BaseURL}/.well-known/agents/{slug}_agent.json and extracts the
// supervaizer.v2 registration with FromAgentCard. Nothing is fetched until
// Start or Refresh.
//
// Errors: BaseURL not an absolute http(s) URL with a host, or with a query or
// fragment; no slugs; an invalid or duplicate slug.
func NewUpstreamSource(opts UpstreamOptions) (*Source, error) {
	base, err := url.Parse(opts.BaseURL)
	if err != nil {
		// The parse error quotes the input, which may hold a password.
		return nil, errors.New("registration: upstream base URL is not a valid URL; want http(s)://host[:port][/prefix]")
	}
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("registration: upstream base URL %q: need http:// or https:// and a host", redact.URL(base.String()))
	}
	if base.RawQuery != "" || base.Fragment != "" || base.ForceQuery {
		return nil, fmt.Errorf("registration: upstream base URL %q: no query or fragment allowed", redact.URL(base.String()))
	}
	base.Path = strings.TrimSuffix(base.Path, "/")
	base.RawPath = ""
	client := opts.Client
	if client == nil {
		client = &http.Client{
			Timeout: DefaultFetchTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	maxBody := opts.MaxBodyBytes
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}
	s, err := newSource("upstream "+redact.URL(base.String()), opts.Slugs, commonOptions{
		interval: opts.RefreshInterval, backoff0: opts.InitialBackoff,
		accepted: opts.Accepted, logger: opts.Logger, onChange: opts.OnChange, onFetch: opts.OnFetch,
	})
	if err != nil {
		return nil, err
	}
	s.fetch = func(ctx context.Context, slug string) (*Registration, error) {
		return fetchCard(ctx, client, base, slug, maxBody)
	}
	return s, nil
}

func fetchCard(ctx context.Context, client *http.Client, base *url.URL, slug string, maxBody int64) (*Registration, error) {
	u := *base
	u.Path = base.Path + "/.well-known/agents/" + slug + "_agent.json"
	where := redact.URL(u.String())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("agent card %s: %w", where, redact.Error(err))
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent card: %w", redact.Error(err)) // net/http's error embeds the full URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("agent card %s: HTTP %d", where, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("agent card %s: reading body: %w", where, redact.Error(err))
	}
	if int64(len(body)) > maxBody {
		return nil, fmt.Errorf("agent card %s: larger than %d bytes", where, maxBody)
	}
	reg, err := FromAgentCard(body)
	if err != nil {
		return nil, fmt.Errorf("agent card %s: %w", where, err)
	}
	return reg, nil
}

// NewFileSource returns a Source that reads registrations from the JSON file
// at path, re-read at every refresh. The file holds one of:
//
//   - a bare registration object (it has supervaizer_contract_version, or
//     both agent and versions, at the top level): it serves the slug it
//     declares in agent.slug;
//   - an Agent Card carrying a supervaizer.v2 extension (see FromAgentCard):
//     it serves the slug its registration declares;
//   - otherwise, an object mapping slug to a registration or an Agent Card,
//     e.g. {"agent_a": {...registration...}, "agent_b": {...card...}}.
//
// A configured slug that the file does not serve gets a failed fetch
// (agent_slug_mismatch for a single registration or card declaring another
// slug). Nothing is read until Start or Refresh, so the file may appear
// later.
//
// Errors: empty path; no slugs; an invalid or duplicate slug.
func NewFileSource(path string, slugs []string, opts FileOptions) (*Source, error) {
	if path == "" {
		return nil, errors.New("registration: empty registration file path")
	}
	maxBody := opts.MaxBodyBytes
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}
	s, err := newSource("file "+path, slugs, commonOptions{
		interval: opts.RefreshInterval, backoff0: opts.InitialBackoff,
		accepted: opts.Accepted, logger: opts.Logger, onChange: opts.OnChange, onFetch: opts.OnFetch,
	})
	if err != nil {
		return nil, err
	}
	s.fetch = func(_ context.Context, slug string) (*Registration, error) {
		return readFileRegistration(path, slug, maxBody)
	}
	return s, nil
}

func readFileRegistration(path, slug string, maxBody int64) (*Registration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("registration file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("registration file %s: %w", path, err)
	}
	if int64(len(data)) > maxBody {
		return nil, fmt.Errorf("registration file %s: larger than %d bytes", path, maxBody)
	}
	tree, err := decodeStrict(data)
	if err != nil {
		return nil, fmt.Errorf("registration file %s: %w", path, err)
	}
	m, ok := tree.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("registration file %s: expected a JSON object, got %s", path, jsonType(tree))
	}
	reg, err := registrationOrCard(m, "")
	if err == nil {
		return reg, nil
	}
	if !errors.Is(err, ErrNoV2Extension) {
		return nil, fmt.Errorf("registration file %s: %w", path, err)
	}
	// A map of slug to registration or card.
	entry, ok := m[slug]
	if !ok || entry == nil {
		return nil, fmt.Errorf("registration file %s: not a registration, not an agent card, and no entry for agent %q (entries: %s)",
			path, slug, strings.Join(sortedKeys(m), ", "))
	}
	em, ok := entry.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("registration file %s: %w", path, typeError(slug, "object", entry))
	}
	reg, err = registrationOrCard(em, slug)
	if err != nil {
		return nil, fmt.Errorf("registration file %s: entry %q: %w", path, slug, err)
	}
	return reg, nil
}

// registrationOrCard reads m as a bare registration when it has the shape of
// one, else as an Agent Card.
func registrationOrCard(m map[string]any, path string) (*Registration, error) {
	_, hasVersion := m["supervaizer_contract_version"]
	_, hasAgent := m["agent"]
	_, hasVersions := m["versions"]
	if hasVersion || (hasAgent && hasVersions) {
		return fromTree(m, path)
	}
	return fromCardTree(m)
}

// Start fetches every slug's card once in the background, without waiting
// (the agent may start after the sidecar), then refreshes each slug every
// RefreshInterval after a success, or after the backoff (InitialBackoff,
// doubling, at most RefreshInterval) after a failure. It stops when ctx is
// done or Close is called.
//
// Errors: Start was already called, or the Source is closed.
func (s *Source) Start(ctx context.Context) error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed.Load() {
		return errors.New("registration: source is closed")
	}
	if s.started {
		return errors.New("registration: source already started")
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	for _, slug := range s.slugs {
		st := s.states[slug]
		s.wg.Add(1)
		go s.run(ctx, st)
	}
	s.logger.Info("agent contract source started",
		zap.String("source", s.what), zap.Strings("slugs", s.slugs),
		zap.Duration("refresh_interval", s.interval))
	return nil
}

func (s *Source) run(ctx context.Context, st *slugState) {
	defer s.wg.Done()
	backoff := s.backoff0
	for {
		err := s.refresh(ctx, st)
		if ctx.Err() != nil {
			return
		}
		delay := s.interval
		if err != nil {
			delay = backoff
			backoff = min(backoff*2, s.interval)
		} else {
			backoff = s.backoff0
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Close stops the background refreshes and waits for them to end. It is
// idempotent and always returns nil. After Close, Refresh and Start fail;
// Contract, Ready and Status keep answering from the last state.
func (s *Source) Close() error {
	s.life.Lock()
	s.closed.Store(true)
	if s.cancel != nil {
		s.cancel()
	}
	s.life.Unlock()
	s.wg.Wait()
	return nil
}

// Refresh fetches slug's card now and installs it if it is valid, then
// returns the outcome. Concurrent fetches of one slug are serialized.
//
// Errors: *refusal.Refusal agent_contract_unavailable when slug is not configured;
// *refusal.Refusal agent_slug_mismatch when the card declares another agent_slug;
// *refusal.Refusal contract_version_unsupported when CheckVersions refuses it; the
// fetch, size or parse error otherwise; ctx.Err() when ctx ends first; an
// error when the Source is closed. On any error the previous contract stays.
func (s *Source) Refresh(ctx context.Context, slug string) error {
	st, ok := s.states[slug]
	if !ok {
		return s.notConfigured(slug)
	}
	if s.closed.Load() {
		return errors.New("registration: source is closed")
	}
	return s.refresh(ctx, st)
}

func (s *Source) notConfigured(slug string) error {
	return refuse(CodeAgentContractUnavailable, fmt.Sprintf(
		"agent %q is not configured in this sidecar", slug))
}

// Contract returns the current contract of slug.
//
// Errors: *refusal.Refusal agent_contract_unavailable when slug is not configured, or
// when no valid card has been read for it yet (the agent may be starting or
// unreachable; Status has the fetch error); *refusal.Refusal
// contract_version_unsupported while the latest card pins versions that are
// not accepted (the older contract is not used).
func (s *Source) Contract(slug string) (*Contract, error) {
	st, ok := s.states[slug]
	if !ok {
		return nil, s.notConfigured(slug)
	}
	if ve := st.versionErr.Load(); ve != nil {
		return nil, ve
	}
	c := st.contract.Load()
	if c == nil {
		return nil, refuse(CodeAgentContractUnavailable, fmt.Sprintf(
			"the agent card of %q has not been read yet; the agent may be starting or unreachable", slug))
	}
	return c, nil
}

// Ready reports whether every configured slug has a contract.
func (s *Source) Ready() bool {
	for _, st := range s.states {
		if st.contract.Load() == nil {
			return false
		}
	}
	return true
}

// Slugs returns the configured slugs in configuration order.
func (s *Source) Slugs() []string { return slices.Clone(s.slugs) }

// Status returns a snapshot of every configured slug's state, keyed by slug.
// The values are copies.
func (s *Source) Status() map[string]SlugStatus {
	out := make(map[string]SlugStatus, len(s.states))
	for slug, st := range s.states {
		st.mu.Lock()
		ss := st.status
		if ss.LastChange != nil {
			lc := *ss.LastChange
			lc.Differences = slices.Clone(lc.Differences)
			ss.LastChange = &lc
		}
		st.mu.Unlock()
		if c := st.contract.Load(); c != nil {
			ss.Ready = true
			ss.Fingerprint = c.Fingerprint()
		}
		out[slug] = ss
	}
	return out
}

// refresh fetches, validates and installs one slug's registration.
func (s *Source) refresh(ctx context.Context, st *slugState) error {
	select {
	case st.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-st.sem }()

	reg, c, err := s.fetchValid(ctx, st.slug)
	now := time.Now()
	if err != nil {
		if ctx.Err() != nil {
			// Shutting down or caller gave up: not an agent failure.
			return err
		}
		var re *refusal.Refusal
		if errors.As(err, &re) && re.Code == CodeContractVersionUnsupported {
			if st.versionErr.Swap(re) == nil && s.logger != nil {
				s.logger.Error("agent contract pins unsupported protocol versions; its calls are refused",
					zap.String("agent_slug", st.slug), zap.String("error", re.Message))
			}
		}
		s.recordFailure(st, err, now)
		if s.onFetch != nil {
			s.onFetch(st.slug, err)
		}
		return err
	}
	st.versionErr.Store(nil)

	old := st.reg
	if old != nil && old.fingerprint == reg.fingerprint {
		s.recordSuccess(st, now, nil)
		if s.onFetch != nil {
			s.onFetch(st.slug, nil)
		}
		return nil
	}
	change := Change{Kind: ChangeInitial, Differences: []string{}}
	oldFP := ""
	if old != nil {
		change, oldFP = Classify(old, reg), old.fingerprint
	}
	st.reg = reg
	st.contract.Store(c)
	rec := &ChangeRecord{
		Kind: change.Kind, Differences: change.Differences,
		OldFingerprint: oldFP, NewFingerprint: reg.fingerprint, At: now,
	}
	s.recordSuccess(st, now, rec)
	s.logChange(st.slug, c, change, oldFP)
	if s.onChange != nil {
		s.onChange(st.slug, Change{Kind: change.Kind, Differences: slices.Clone(change.Differences)}, oldFP, reg.fingerprint)
	}
	if s.onFetch != nil {
		s.onFetch(st.slug, nil)
	}
	return nil
}

func (s *Source) fetchValid(ctx context.Context, slug string) (*Registration, *Contract, error) {
	reg, err := s.fetch(ctx, slug)
	if err != nil {
		return nil, nil, err
	}
	if reg.Agent.Slug != slug {
		return nil, nil, refuse(CodeAgentSlugMismatch, fmt.Sprintf(
			"the card read for configured agent %q declares agent_slug %q", slug, reg.Agent.Slug))
	}
	c := NewContract(reg)
	if err := c.CheckVersions(s.accepted); err != nil {
		return nil, nil, err
	}
	return reg, c, nil
}

func (s *Source) recordFailure(st *slugState, err error, now time.Time) {
	msg := err.Error()
	st.mu.Lock()
	st.status.LastError = msg
	st.status.LastErrorAt = now
	st.status.LastFetch = now
	st.status.ConsecutiveFailures++
	repeat := st.lastLog == msg
	st.lastLog = msg
	failures := st.status.ConsecutiveFailures
	st.mu.Unlock()

	fields := []zap.Field{
		zap.String("slug", st.slug), zap.String("source", s.what),
		zap.String("error", msg), zap.Int("consecutive_failures", failures),
	}
	if code := codeOf(err); code != "" {
		fields = append(fields, zap.String("code", code))
	}
	if c := st.contract.Load(); c != nil {
		fields = append(fields, zap.String("kept_fingerprint", c.Fingerprint()))
	}
	if repeat {
		s.logger.Debug("agent card refresh failed again", fields...)
		return
	}
	if st.contract.Load() != nil {
		s.logger.Warn("agent card refresh failed; keeping the last good contract", fields...)
	} else {
		s.logger.Warn("agent card refresh failed; no contract for this agent yet", fields...)
	}
}

func (s *Source) recordSuccess(st *slugState, now time.Time, rec *ChangeRecord) {
	st.mu.Lock()
	recovered := st.status.ConsecutiveFailures > 0
	failures := st.status.ConsecutiveFailures
	st.status.LastError = ""
	st.status.LastFetch = now
	st.status.LastSuccess = now
	st.status.ConsecutiveFailures = 0
	st.lastLog = ""
	if rec != nil {
		st.status.LastChange = rec
	}
	st.mu.Unlock()
	if recovered {
		s.logger.Info("agent card refresh recovered",
			zap.String("slug", st.slug), zap.String("source", s.what),
			zap.Int("failures_before", failures))
	}
}

func (s *Source) logChange(slug string, c *Contract, change Change, oldFP string) {
	if oldFP == "" {
		s.logger.Info("agent contract loaded",
			zap.String("slug", slug), zap.String("source", s.what),
			zap.String("fingerprint", c.Fingerprint()),
			zap.Int("actions", len(c.actionOrder)), zap.Int("surfaces", len(c.surfaceOrder)))
		return
	}
	fields := []zap.Field{
		zap.String("slug", slug), zap.String("kind", change.Kind.String()),
		zap.String("old_fingerprint", oldFP), zap.String("new_fingerprint", c.Fingerprint()),
		zap.Strings("differences", change.Differences),
	}
	if change.Kind == ChangeExpanding {
		s.logger.Warn("agent contract changed: expanding", fields...)
	} else {
		s.logger.Info("agent contract changed", fields...)
	}
}
