// The gate's Prometheus collectors and the observers that feed them.

package gate

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/limits"
)

// metrics are the sidecar's Prometheus collectors, registered in Caddy's
// registry (served on Caddy's metrics endpoint). Label values are bounded:
// route classes, outcomes, data.code strings, store operations; never a
// workspace id, a token or a key.
type Metrics struct {
	decisions        *prometheus.CounterVec // route, outcome, code
	verifyDuration   prometheus.Histogram   // seconds, signature checks only
	tokenCache       *prometheus.CounterVec // result=hit|miss
	jwksRefresh      *prometheus.CounterVec // result=ok|error, reason ("" for ok; grants.JWKSFetchErrorReason)
	jwksLastGood     prometheus.GaugeFunc   // seconds since the last good JWKS fetch
	registrationRuns *prometheus.CounterVec // result=ok|error
	contractChanges  *prometheus.CounterVec // kind=initial (first load)|harmless|expanding
	idempotency      *prometheus.CounterVec // event
	eventsFanout     *prometheus.CounterVec // event (events_fanout on)
	introCalls       *prometheus.CounterVec // result=active|inactive|error (calls to the introspection endpoint)
	introCache       *prometheus.CounterVec // result=hit|miss|shared
	introDuration    prometheus.Histogram   // seconds, one introspection call
	limitDecisions   *prometheus.CounterVec // rule (its configured text), outcome
	limitStoreErrors *prometheus.CounterVec // fallback=local|deny
	limitKeysGauge   prometheus.Gauge       // keys tracked by the limits state

	// Children resolved once instead of on every request (a label set's
	// hash and lookup in its vector): the token cache's two results, and
	// the decision counters met so far (decisionChildren).
	tokenCacheHit, tokenCacheMiss prometheus.Counter
	decisionChildren
}

const metricsNamespace = "supervaizer_sidecar"

// NewMetrics creates the collectors and registers them in reg, reusing
// collectors already registered by another supervaizer_auth handler of the
// same config. reg may be nil (no metrics app): collectors still count.
func NewMetrics(reg *prometheus.Registry, lastGood func() float64) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
			Name: "decisions_total", Help: "Authorization decisions by route class, outcome and code."},
			[]string{"route", "outcome", "code"}),
		verifyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace,
			Name: "token_verify_duration_seconds", Help: "Time to verify a workspace token that was not in the verified-token cache.",
			Buckets: []float64{.00001, .00002, .00005, .0001, .0002, .0005, .001, .005, .01, .05, .1, 1}}),
		tokenCache: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
			Name: "token_cache_total", Help: "Verified-token cache lookups by result (hit, miss)."}, []string{"result"}),
		jwksRefresh: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
			Name: "jwks_refresh_total", Help: "JWKS fetches by result (ok, error) and, for errors, reason (no_usable_key, invalid_document, http_status, unreachable); a failed fetch never replaces the last good keys."},
			[]string{"result", "reason"}),
		registrationRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
			Name: "registration_fetch_total", Help: "Agent card (registration) fetches by result (ok, error)."}, []string{"result"}),
		contractChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
			Name: "contract_changes_total", Help: "Agent contract loads and fingerprint changes by kind (initial: the first load; harmless; expanding)."}, []string{"kind"}),
		idempotency: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
			Name: "idempotency_events_total", Help: "Idempotency events: forward, recorded, not_recorded, kept_<reason>, replay, conflict, wait, in_progress, store_error, share_full, missing_key."}, []string{"event"}),
		eventsFanout: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
			Name: "events_fanout_total", Help: "events_fanout: upstream_open, upstream_refused, upstream_end, client_join, client_leave, client_behind."}, []string{"event"}),
		introCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
			Name: "introspection_total", Help: "Calls to the token introspection endpoint by result (active, inactive, error)."}, []string{"result"}),
		introCache: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
			Name: "introspection_cache_total", Help: "Introspection checks by source (hit: cached answer, miss: called the endpoint, shared: waited for a concurrent call)."}, []string{"result"}),
		introDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace,
			Name: "introspection_duration_seconds", Help: "Latency of one call to the token introspection endpoint.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}),
	}
	m.limitDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
		Name: "limit_decisions_total", Help: "Limits rule outcomes by rule (as configured) and outcome (allowed, rate_limited, concurrency_limited)."},
		[]string{"rule", "outcome"})
	m.limitStoreErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace,
		Name: "limit_store_errors_total", Help: "Failed calls to the limits Redis store, by what the call did instead (on_store_error: local, deny)."},
		[]string{"fallback"})
	m.limitKeysGauge = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace,
		Name: "limit_tracked_keys", Help: "Keys (rule, agent, workspace) the limits state holds in memory: local buckets and keys with calls in flight; bounded by max_keys."})
	m.jwksLastGood = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace,
		Name: "jwks_seconds_since_last_good_refresh", Help: "Seconds since the last good JWKS fetch (-1: never, or no JWKS configured)."}, lastGood)
	if reg == nil {
		return m.resolve()
	}
	m.decisions = register(reg, m.decisions)
	m.verifyDuration = register(reg, m.verifyDuration)
	m.tokenCache = register(reg, m.tokenCache)
	m.jwksRefresh = register(reg, m.jwksRefresh)
	m.registrationRuns = register(reg, m.registrationRuns)
	m.contractChanges = register(reg, m.contractChanges)
	m.idempotency = register(reg, m.idempotency)
	m.eventsFanout = register(reg, m.eventsFanout)
	m.introCalls = register(reg, m.introCalls)
	m.introCache = register(reg, m.introCache)
	m.introDuration = register(reg, m.introDuration)
	m.limitDecisions = register(reg, m.limitDecisions)
	m.limitStoreErrors = register(reg, m.limitStoreErrors)
	m.limitKeysGauge = register(reg, m.limitKeysGauge)
	_ = reg.Register(m.jwksLastGood) // a second handler's gauge reports through the first one
	return m.resolve()
}

// resolve looks up the fixed label sets' children once the collectors are
// final (registration may have swapped them for an earlier handler's).
func (m *Metrics) resolve() *Metrics {
	m.tokenCacheHit = m.tokenCache.WithLabelValues("hit")
	m.tokenCacheMiss = m.tokenCache.WithLabelValues("miss")
	return m
}

func register[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

func (m *Metrics) decision(route, outcome, code string) {
	m.decisionCounter(m.decisions, decisionLabels{route, outcome, code}).Inc()
}

// ObserveVerify is grants.Config.Observe.
func (m *Metrics) ObserveVerify(cached bool, d time.Duration, _ string) {
	if cached {
		m.tokenCacheHit.Inc()
		return
	}
	m.tokenCacheMiss.Inc()
	m.verifyDuration.Observe(d.Seconds())
}

// JWKSFetch counts one JWKS fetch (grants.JWKSOptions.OnRefresh).
func (m *Metrics) JWKSFetch(err error) {
	if err != nil {
		m.jwksRefresh.WithLabelValues("error", grants.JWKSFetchErrorReason(err)).Inc()
		return
	}
	m.jwksRefresh.WithLabelValues("ok", "").Inc()
}

func (m *Metrics) RegistrationFetch(err error) {
	if err != nil {
		m.registrationRuns.WithLabelValues("error").Inc()
		return
	}
	m.registrationRuns.WithLabelValues("ok").Inc()
}

func (m *Metrics) ContractChange(kind string) { m.contractChanges.WithLabelValues(kind).Inc() }

func (m *Metrics) idem(event string) { m.idempotency.WithLabelValues(event).Inc() }

// fanout counts one events_fanout event; client_join minus client_leave is
// the number of client streams open.
func (m *Metrics) Fanout(event string) { m.eventsFanout.WithLabelValues(event).Inc() }

func (m *Metrics) IdempotencyObserver(log *zap.Logger) idempotency.Observer {
	ev := func(name string) func(idempotency.Key) { return func(idempotency.Key) { m.idem(name) } }
	return idempotency.Observer{
		Forward: ev("forward"), Recorded: ev("recorded"), NotRecorded: ev("not_recorded"),
		Kept: func(k idempotency.Key, reason string) {
			m.idem("kept_" + reason)
			// The key is in flight until lock_ttl: retries get
			// idempotency_in_progress. Client-chosen strings stay out of the
			// line but the action (one of the configured ones).
			log.Warn("idempotency key kept in flight: the call may have reached the agent and was not recorded",
				zap.String("reason", reason), zap.String("action", k.Action))
		},
		Replay: ev("replay"), Conflict: ev("conflict"), Wait: ev("wait"), InProgress: ev("in_progress"),
		StoreError: func(idempotency.Key, string, error) { m.idem("store_error") },
		ShareFull:  ev("share_full"),
	}
}

// JWKSAge returns the seconds since the last good JWKS fetch, or -1.
func JWKSAge(v **grants.Verifier) func() float64 {
	return func() float64 {
		if *v == nil {
			return -1
		}
		loaded, last, _, ok := (*v).JWKSStatus()
		if !ok || !loaded {
			return -1
		}
		return time.Since(last).Seconds()
	}
}

// IntrospectionCall is introspection.Config.Observe: one call's result and latency.
func (m *Metrics) IntrospectionCall(result string, d time.Duration) {
	m.introCalls.WithLabelValues(result).Inc()
	m.introDuration.Observe(d.Seconds())
}

// introspectionCache counts one introspection check by source (hit, miss, shared).
func (m *Metrics) introspectionCache(source string) {
	if source != "" {
		m.introCache.WithLabelValues(source).Inc()
	}
}

// LimitsObserver counts limits decisions and store errors; a store error
// is also a warn line (the error names no password: URLs are redacted).
func (m *Metrics) LimitsObserver(log *zap.Logger) limits.Observer {
	return limits.Observer{
		Decision: func(rule, outcome string) { m.limitDecisions.WithLabelValues(rule, outcome).Inc() },
		StoreError: func(err error, fallback string) {
			m.limitStoreErrors.WithLabelValues(fallback).Inc()
			log.Warn("limits store unavailable: calls follow on_store_error until it answers again",
				zap.String("on_store_error", fallback), zap.String("error", redact.URLsIn(err.Error())))
		},
	}
}

// limitKeys sets the tracked-keys gauge.
func (m *Metrics) limitKeys(n int) { m.limitKeysGauge.Set(float64(n)) }
