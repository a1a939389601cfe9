package caddymodule

import (
	"reflect"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Caddy logs every request header of a request in three places
// (docs/logging.md, "Credentials in Caddy's own lines"): the
// server's error log (http.log.error…), the access log (http.log.access…)
// and reverse_proxy's own lines (http.handlers.reverse_proxy). It redacts
// Authorization, Cookie, Set-Cookie and Proxy-Authorization by itself, not
// the Supervaizer credentials below.

// credentialHeaders are the request headers that carry a Supervaizer
// credential, as Caddy's logs name them (Go's canonical header form).
var credentialHeaders = []string{"X-Api-Key", "X-Supervaize-Workspace-Authorization"}

// quietLevels are log levels above error: a log at one of them receives no
// request line (the error log writes at error, reverse_proxy at warn).
var quietLevels = []string{"DPANIC", "PANIC", "FATAL"}

// logView is what the header check needs of one configured Caddy log.
type logView struct {
	name             string
	level            string
	include, exclude []string
	removed          []string // the credential headers its encoder deletes or replaces (removedHeaders)
}

// warnUnfilteredLogs logs one warning per configured log that would write
// the Supervaizer credentials: a log admitting a logger that writes request
// headers whose encoder does not delete or replace both credential headers.
// Nothing is refused: the logging choice is the operator's. Provision calls
// it with the config being loaded (loggingOf) and the server the handler
// belongs to.
func warnUnfilteredLogs(ctx caddy.Context, log *zap.Logger) {
	logs, ok := loggingOf(ctx)
	if !ok {
		log.Debug("could not read Caddy's logging config: the credential-filter check of the logs is skipped")
		return
	}
	srv, _ := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	var slc *caddyhttp.ServerLogConfig
	if srv != nil {
		slc = srv.Logs
	}
	for _, w := range unfilteredLogWarnings(logs, requestLoggerNames(slc)) {
		log.Warn(w)
	}
	for _, w := range debugConfigLogWarnings(logs) {
		log.Warn(w)
	}
}

// configDumpLogger is the logger of Caddy's "adjusted config" line: at
// DEBUG, when the http app is provisioned (before its handlers are), it
// writes the whole http app config, every handler's JSON as written
// included (caddy v2.11, modules/caddyhttp/autohttps.go): the API keys,
// introspection's client_secret and bearer, the Redis URLs with their
// passwords (docs/logging.md, "Secrets in a DEBUG log").
const configDumpLogger = "http.auto_https"

// debugConfigLogWarnings returns one warning per log (sorted by name) at
// DEBUG level that admits configDumpLogger: the global `debug` option, or
// a `log { level DEBUG }` without `exclude http.auto_https`. The line is
// written before any handler is provisioned, so this can only say so
// afterwards, at every start.
func debugConfigLogWarnings(logs []logView) []string {
	slices.SortFunc(logs, func(a, b logView) int { return strings.Compare(a.name, b.name) })
	var out []string
	for _, l := range logs {
		if !strings.EqualFold(l.level, "DEBUG") || !loggerAllowed(l.include, l.exclude, configDumpLogger) {
			continue
		}
		out = append(out, "log "+l.name+" is at DEBUG level and receives "+configDumpLogger+", whose \"adjusted config\" line "+
			"writes the whole config at start, every secret written in it included (api_key, client_secret, bearer, "+
			"redis_url passwords); use level INFO, or `exclude "+configDumpLogger+"` on that log, and keep secrets in "+
			"{env.NAME} or {file.PATH} placeholders (docs/logging.md, \"Secrets in a DEBUG log\")")
	}
	return out
}

// requestLoggerNames are the names of the loggers that write a request's
// headers for a server with log config slc (nil: no access log): its error
// and access loggers, named after the server's logger names
// (caddyhttp.ServerLogConfig), and reverse_proxy's.
func requestLoggerNames(slc *caddyhttp.ServerLogConfig) []string {
	names := []string{"http.handlers.reverse_proxy"}
	if slc == nil {
		return append(names, "http.log.error")
	}
	sub := []string{slc.DefaultLoggerName}
	for _, ns := range slc.LoggerNames {
		sub = append(sub, ns...)
	}
	for _, base := range []string{"http.log.error", "http.log.access"} {
		for _, n := range sub {
			if n == "" {
				names = append(names, base)
			} else {
				names = append(names, base+"."+n)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// unfilteredLogWarnings returns one warning per log (sorted by name) that
// admits one of the loggers in requestLoggers at error level or below and
// whose encoder is not a filter deleting or replacing every credential
// header.
func unfilteredLogWarnings(logs []logView, requestLoggers []string) []string {
	slices.SortFunc(logs, func(a, b logView) int { return strings.Compare(a.name, b.name) })
	var out []string
	for _, l := range logs {
		if slices.Contains(quietLevels, strings.ToUpper(l.level)) {
			continue
		}
		var admitted []string
		for _, n := range requestLoggers {
			if loggerAllowed(l.include, l.exclude, n) {
				admitted = append(admitted, n)
			}
		}
		if len(admitted) == 0 {
			continue
		}
		var missing []string
		for _, h := range credentialHeaders {
			if !slices.Contains(l.removed, h) {
				missing = append(missing, h)
			}
		}
		if len(missing) == 0 {
			continue
		}
		out = append(out, "log "+l.name+" receives request headers ("+strings.Join(admitted, ", ")+
			") and does not delete "+strings.Join(missing, " or ")+": the transport key and the workspace token "+
			"would be written in full; give it `format filter` with `request>headers>X-Api-Key delete` and "+
			"`request>headers>X-Supervaize-Workspace-Authorization delete` (docs/logging.md)")
	}
	return out
}

// removedHeaders lists the credential headers an encoder keeps out of its
// lines: those a filter encoder (Caddy's logging.FilterEncoder, or a filter
// wrapping a filter) deletes or replaces. Caddy frees the encoder's JSON once
// loaded, so the loaded encoder is read: its wrapped encoder is unexported,
// read through reflection (caddy v2.11, modules/logging/filterencoder.go).
func removedHeaders(enc zapcore.Encoder) []string {
	var out []string
	for depth := 0; depth < 8; depth++ {
		fe, ok := enc.(*logging.FilterEncoder)
		if !ok || fe == nil {
			break
		}
		for _, h := range credentialHeaders {
			switch fe.Fields["request>headers>"+h].(type) {
			case *logging.DeleteFilter, logging.DeleteFilter, *logging.ReplaceFilter:
				out = append(out, h)
			}
		}
		enc = unexportedEncoder(reflect.ValueOf(fe).Elem(), "wrapped")
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// unexportedEncoder reads the zapcore.Encoder interface field name of the
// struct v (read-only): nil unless it holds a *logging.FilterEncoder, the
// only encoder whose fields removedHeaders looks at.
func unexportedEncoder(v reflect.Value, name string) zapcore.Encoder {
	f := v.FieldByName(name)
	if f.Kind() != reflect.Interface || f.IsNil() {
		return nil
	}
	e := f.Elem()
	if e.Type() != reflect.TypeOf((*logging.FilterEncoder)(nil)) || e.IsNil() {
		return nil
	}
	return (*logging.FilterEncoder)(e.UnsafePointer())
}

// loggerAllowed reports whether a log with these include/exclude lists
// admits the logger name: Caddy's rule (caddy v2.11, logging.go,
// CustomLog.loggerAllowed for a logger name), restated because Caddy does
// not export it: no lists admit everything; otherwise the longest matching
// namespace wins, an include list requires a match, "*" excludes every
// module logger.
func loggerAllowed(include, exclude []string, name string) bool {
	if len(include) == 0 && len(exclude) == 0 {
		return true
	}
	name += "."
	longestAccept, longestReject := 0, 0
	for _, ns := range include {
		if strings.HasPrefix(name, ns+".") && len(ns) > longestAccept {
			longestAccept = len(ns)
		}
	}
	if len(include) > 0 && longestAccept == 0 {
		return false
	}
	for _, ns := range exclude {
		if ns == "*" {
			return false
		}
		if strings.HasPrefix(name, ns+".") && len(ns) > longestReject {
			longestReject = len(ns)
		}
	}
	if longestReject > longestAccept {
		return false
	}
	return longestAccept > longestReject || (len(include) == 0 && longestReject == 0)
}

// loggingOf reads the logs of the config ctx was made for, as Caddy set
// them up (the default log included; logs writing to discard removed).
// Caddy has no getter: caddy.Context keeps the *caddy.Config in its
// unexported cfg field, read here through reflection, read-only, as adminOf
// does (startup.go). ok is false when the layout is not the expected one;
// TestLoggingOf pins it.
func loggingOf(ctx caddy.Context) (logs []logView, ok bool) {
	defer func() {
		if recover() != nil {
			logs, ok = nil, false
		}
	}()
	cfgField := reflect.ValueOf(ctx).FieldByName("cfg")
	if cfgField.Kind() != reflect.Pointer || cfgField.IsNil() ||
		cfgField.Type() != reflect.TypeOf((*caddy.Config)(nil)) {
		return nil, false
	}
	cfg := (*caddy.Config)(cfgField.UnsafePointer())
	if cfg.Logging == nil {
		return nil, true
	}
	for name, l := range cfg.Logging.Logs {
		if l == nil {
			continue
		}
		enc := unexportedEncoder(reflect.ValueOf(l).Elem().FieldByName("BaseLog"), "encoder")
		logs = append(logs, logView{name: name, level: l.Level, include: l.Include, exclude: l.Exclude, removed: removedHeaders(enc)})
	}
	return logs, true
}
