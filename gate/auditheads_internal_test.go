package gate

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// fixedClock answers one instant, so that two lines differ only by what
// they were given.
type fixedClock struct{}

func (fixedClock) Now() time.Time                       { return time.Unix(1700000000, 123456789) }
func (fixedClock) NewTicker(time.Duration) *time.Ticker { return time.NewTicker(time.Hour) }

// TestAuditHeadsSameBytes: an audit line written through a child logger
// holding its head (audit.go, auditHeads) is byte for byte the line encoded field
// by field, for the JSON and the console encoders, allow and deny, a
// method whose head is kept and one whose is not; a gate given another
// logger writes to it, not to the first one's children.
func TestAuditHeadsSameBytes(t *testing.T) {
	for _, enc := range []struct {
		name string
		new  func(zapcore.EncoderConfig) zapcore.Encoder
	}{{"json", zapcore.NewJSONEncoder}, {"console", zapcore.NewConsoleEncoder}} {
		t.Run(enc.name, func(t *testing.T) {
			var out bytes.Buffer
			newLog := func(w *bytes.Buffer) *zap.Logger {
				core := zapcore.NewCore(enc.new(zap.NewProductionEncoderConfig()), zapcore.AddSync(w), zap.DebugLevel)
				return zap.New(core, zap.WithClock(fixedClock{})).Named("http.handlers.supervaizer_auth")
			}
			g := &Gate{log: newLog(&out), auditAllows: true, metrics: NewMetrics(nil, func() float64 { return 0 })}
			full := audit{route: "controller", method: "POST", target: "action.job.sync", agentSlug: benchAgent,
				workspaceID: "workspace_123", grantID: "grant-1", jti: "jti-1", client: "127.0.0.1:4242"}
			for _, sc := range []struct {
				name   string
				method string
				deny   string
				kept   bool
			}{{"allow", "POST", "", true}, {"deny", "POST", KeyUnknown, true},
				{"odd method", "PROPFIND", "", false}, {"quoted method", `P"O`, "", false}} {
				lines := make([]string, 3)
				for i := range lines {
					a := full
					a.method = sc.method
					if sc.deny != "" {
						a.deny(sc.deny)
					} else {
						a.allow(verifiedToken)
					}
					out.Reset()
					g.logDecision(&a, 1500*time.Microsecond)
					lines[i] = out.String()
				}
				if lines[0] == "" || lines[1] != lines[0] || lines[2] != lines[0] {
					t.Fatalf("%s: lines differ:\n%s%s%s", sc.name, lines[0], lines[1], lines[2])
				}
				head := auditHead{route: full.route, method: sc.method, outcome: "allow", code: verifiedToken}
				if sc.deny != "" {
					head.outcome, head.code = "deny", sc.deny
				}
				if kept := g.heads.logger(g.log, head) != nil; kept != sc.kept {
					t.Fatalf("%s: head kept %v, want %v", sc.name, kept, sc.kept)
				}
			}
			if enc.name == "json" && !strings.Contains(out.String(),
				`"route":"controller","method":"P\"O","outcome":"allow","code":"token","duration":0.0015,"client":"127.0.0.1:4242","target":"action.job.sync"`) {
				t.Fatalf("field order: %s", out.String())
			}

			var other bytes.Buffer
			g.log = newLog(&other)
			out.Reset()
			a := full
			a.allow(verifiedToken)
			g.logDecision(&a, time.Millisecond)
			if out.Len() != 0 || !strings.Contains(other.String(), "supervaizer decision") {
				t.Fatalf("after the logger changed: first %q, second %q", out.String(), other.String())
			}
		})
	}
}

// TestAuditHeadsConcurrent: lines written at once from many goroutines,
// while their heads are being kept, each come out once with their own
// head (make test runs it with the race detector).
func TestAuditHeadsConcurrent(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	g := &Gate{log: zap.New(core), auditAllows: true, metrics: NewMetrics(nil, func() float64 { return 0 })}
	methods := []string{"GET", "POST", "PUT", "DELETE"}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				a := audit{route: "controller", method: methods[(w+i)%len(methods)], client: "c"}
				a.allow(verifiedToken)
				g.logDecision(&a, time.Millisecond)
			}
		})
	}
	wg.Wait()
	counts := map[string]int{}
	for _, e := range logs.All() {
		m := e.ContextMap()
		if m["route"] != "controller" || m["outcome"] != "allow" || m["code"] != verifiedToken {
			t.Fatalf("line %v", m)
		}
		counts[m["method"].(string)]++
	}
	for _, m := range methods {
		if counts[m] != 200 {
			t.Fatalf("method %s: %d lines, want 200 (%v)", m, counts[m], counts)
		}
	}
}
