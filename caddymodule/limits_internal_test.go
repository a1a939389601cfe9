package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/supervaize/supervaizer-sidecar/config"
)

// TestLimitsCaddyfile: the syntax reads into the JSON shape.
func TestLimitsCaddyfile(t *testing.T) {
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`supervaizer_auth {
		limits {
			rate job.start 10/m
			rate dataset.*.query resource.*.import 100/h burst 5
			concurrency dataset.*.query 2
			store redis redis://127.0.0.1:6379/0
			redis_mode sentinel
			min_replicas_ack 1
			replica_ack_timeout 250ms
			key_prefix p:
			on_store_error deny
			max_keys 500
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(h.Limits)
	want := `{"rate":[{"targets":["job.start"],"rate":"10/m"},{"targets":["dataset.*.query","resource.*.import"],"rate":"100/h","burst":5}],` +
		`"concurrency":[{"targets":["dataset.*.query"],"max":2}],"store":"redis","redis_url":"redis://127.0.0.1:6379/0",` +
		`"redis_mode":"sentinel","min_replicas_ack":1,"replica_ack_timeout":250000000,"key_prefix":"p:","on_store_error":"deny","max_keys":500}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if errs := h.Limits.Domain().Validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
}

// TestLimitsCaddyfileAndJSONRefuseTheSame: every bad value is refused by
// Validate with the same message whether it came from the Caddyfile or
// from the JSON config.
func TestLimitsCaddyfileAndJSONRefuseTheSame(t *testing.T) {
	for _, c := range []struct{ caddyfile, json, want string }{
		{"rate job.start 0/m", `{"rate":[{"targets":["job.start"],"rate":"0/m"}]}`, "n must be a plain whole number from 1"},
		{"rate job.start 10/d", `{"rate":[{"targets":["job.start"],"rate":"10/d"}]}`, "want <n>/s, <n>/m or <n>/h"},
		{"rate job.start 10/m burst -1", `{"rate":[{"targets":["job.start"],"rate":"10/m","burst":-1}]}`, "burst must be from 1"},
		{"rate job.st* 10/m", `{"rate":[{"targets":["job.st*"],"rate":"10/m"}]}`, "bad target pattern"},
		{"concurrency job.start 0", `{"concurrency":[{"targets":["job.start"],"max":0}]}`, "concurrency 0: must be from 1"},
		{"concurrency job.start 100001", `{"concurrency":[{"targets":["job.start"],"max":100001}]}`, "must be from 1 to 100000"},
		{"rate * 1/s\nstore disk", `{"rate":[{"targets":["*"],"rate":"1/s"}],"store":"disk"}`, "store must be memory or redis"},
		{"rate * 1/s\non_store_error maybe", `{"rate":[{"targets":["*"],"rate":"1/s"}],"on_store_error":"maybe"}`, "on_store_error must be local or deny"},
		{"rate * 1/s\nmax_keys -1", `{"rate":[{"targets":["*"],"rate":"1/s"}],"max_keys":-1}`, "max_keys must be from 1"},
		{"rate * 1/s\nmax_keys 20000000", `{"rate":[{"targets":["*"],"rate":"1/s"}],"max_keys":20000000}`, "max_keys must be from 1"},
		{"rate * 1/s\nstore redis redis://r:6379\nmin_replicas_ack -1", `{"rate":[{"targets":["*"],"rate":"1/s"}],"store":"redis","redis_url":"redis://r:6379","min_replicas_ack":-1}`, "limits min_replicas_ack must not be negative"},
		{"rate * 1/s\nstore redis redis://r:6379\nmin_replicas_ack 99", `{"rate":[{"targets":["*"],"rate":"1/s"}],"store":"redis","redis_url":"redis://r:6379","min_replicas_ack":99}`, "limits min_replicas_ack must be at most 16"},
		{"rate * 1/s\nstore redis redis://r:6379\nreplica_ack_timeout 2h", `{"rate":[{"targets":["*"],"rate":"1/s"}],"store":"redis","redis_url":"redis://r:6379","replica_ack_timeout":7200000000000}`, "limits replica_ack_timeout must be at most 1m0s"},
		{"rate * 1/s\nstore memory\nkey_prefix p:", `{"rate":[{"targets":["*"],"rate":"1/s"}],"store":"memory","key_prefix":"p:"}`, "key_prefix is a setting of the Redis store only"},
		{"rate * 1/s\nredis_mode sentinel", `{"rate":[{"targets":["*"],"rate":"1/s"}],"redis_mode":"sentinel"}`, "redis_mode is a setting of the Redis store only"},
		{"rate * 1/s\nmin_replicas_ack 1", `{"rate":[{"targets":["*"],"rate":"1/s"}],"min_replicas_ack":1}`, "min_replicas_ack is a setting of the Redis store only"},
		{"rate * 1/s\nreplica_ack_timeout 1s", `{"rate":[{"targets":["*"],"rate":"1/s"}],"replica_ack_timeout":1000000000}`, "replica_ack_timeout is a setting of the Redis store only"},
		{"rate \"job.start \" 10/m", `{"rate":[{"targets":["job.start "],"rate":"10/m"}]}`, "bad target pattern \"job.start \""},
		{"concurrency \"job start\" 2", `{"concurrency":[{"targets":["job start"],"max":2}]}`, "bad target pattern"},
		{"rate job/start 10/m", `{"rate":[{"targets":["job/start"],"rate":"10/m"}]}`, "bad target pattern"},
		{"rate other:job 10/m", `{"rate":[{"targets":["other:job"],"rate":"10/m"}]}`, "the only namespace is surface:"},
		{"rate job.start +10/m", `{"rate":[{"targets":["job.start"],"rate":"+10/m"}]}`, "n must be a plain whole number"},
		{"rate job.start 010/m", `{"rate":[{"targets":["job.start"],"rate":"010/m"}]}`, "n must be a plain whole number"},
		{"rate * 1/s\nredis_mode ring", `{"rate":[{"targets":["*"],"rate":"1/s"}],"redis_mode":"ring"}`, "redis_mode must be single"},
		{"store memory", `{"store":"memory"}`, "no rate or concurrency rule"},
	} {
		var fromFile Handler
		if err := fromFile.UnmarshalCaddyfile(caddyfile.NewTestDispenser("supervaizer_auth {\nlimits {\n" + c.caddyfile + "\n}\n}")); err != nil {
			t.Fatalf("%q: the Caddyfile parser refused it before Validate: %v", c.caddyfile, err)
		}
		var fromJSON Handler
		if err := json.Unmarshal([]byte(`{"limits":`+c.json+`}`), &fromJSON); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fromFile.Limits, fromJSON.Limits) {
			t.Errorf("%q: Caddyfile %+v, JSON %+v", c.caddyfile, fromFile.Limits, fromJSON.Limits)
		}
		e1, e2 := fromFile.Validate(), fromJSON.Validate()
		if e1 == nil || e2 == nil || e1.Error() != e2.Error() || !strings.Contains(e1.Error(), c.want) {
			t.Errorf("%q: Caddyfile %v, JSON %v, want both %q", c.caddyfile, e1, e2, c.want)
		}
	}
}

// TestLimitsCaddyfileSyntaxErrors: what the parser itself refuses.
func TestLimitsCaddyfileSyntaxErrors(t *testing.T) {
	for _, in := range []string{
		"rate 10/m", "rate job.start 10/m burst x", "concurrency 2", "concurrency job.start x",
		"store", "store redis", "store memory extra", "max_keys x", "unknown 1",
		"rate job.start 10/m burst 0", "rate * 1/s\nmax_keys 0", "rate job.start 10/m burst +0", "rate job.start 10/m burst 05",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("supervaizer_auth {\nlimits {\n" + in + "\n}\n}")); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// TestLimitsSpanAndAuditLine: a refusal by a rule sets the span attributes
// and the audit line's limit fields, and the agent (next) is not called.
func TestLimitsSpanAndAuditLine(t *testing.T) {
	h, logs, mint := traceGate(t, func(c *config.Config) {
		c.Limits = &config.LimitsConfig{Rate: []config.RateLimit{{Targets: []string{"job.sync"}, Rate: "1/h"}}}
	})
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reached := 0
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		reached++
		w.WriteHeader(http.StatusOK)
		return nil
	})
	for i, want := range []string{"allowed", "rate_limited"} {
		ctx, span := tp.Tracer("test").Start(context.Background(), "request")
		r, _ := jobSyncRequest(ctx, mint(nil))
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, next); err != nil {
			t.Fatal(err)
		}
		span.End()
		wantSpan(t, sr, span.SpanContext().SpanID().String(), map[string]string{"supervaizer.limit": want, "supervaizer.limit.rule": map[bool]string{true: "rate job.sync 1/h burst 1"}[i == 1]})
		line := lastLine(t, logs)
		if line["limit"] != want || line["limit_key"] != "workspace" {
			t.Errorf("audit line %v: want limit %s", line, want)
		}
		if i == 1 && (line["code"] != "rate_limited" || line["limit_rule"] != "rate job.sync 1/h burst 1" || w.Header().Get("Retry-After") == "") {
			t.Errorf("refusal: line %v, Retry-After %q", line, w.Header().Get("Retry-After"))
		}
	}
	if reached != 1 {
		t.Fatalf("next reached %d times, want 1 (the refused call never)", reached)
	}
}
