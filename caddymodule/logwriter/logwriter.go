// Package logwriter is the `buffered` Caddy log writer: another log writer behind a
// buffer flushed on an interval, so that a log line is not a system call.
//
// Why: an audit line per request written straight to a file or a pipe costs
// one write(2) on the request's path; under load that is a measurable part of
// what the gate adds to the proxy (bench/README.md, "Where the time goes").
// The trade-off (docs/logging.md): lines still in the buffer when the process
// is killed (SIGKILL, OOM, a crash) are lost — up to flush_interval's worth or
// size bytes, whichever comes first. A graceful exit (SIGTERM, SIGINT, `caddy
// stop`) flushes every open buffer (caddy.OnExit) and writes what Caddy logs
// after that straight through. Caddy v2.11 does not close
// log writers when a config is unloaded, so a reload that drops the writer
// leaves it to its flush timer, which still writes every line within
// flush_interval. The module ID (caddy.logging.writers.buffered) is
// registered by importing this package (caddymodule and cmd/ do).
package logwriter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"
	"go.uber.org/zap/zapcore"
)

func init() {
	caddy.RegisterModule(BufferedWriter{})
}

// Defaults of the buffered writer.
const (
	defaultLogFlushInterval = time.Second
	defaultLogBufferSize    = 256 << 10 // bytes
	// Bounds: a shorter interval is a busy flush loop; a larger buffer is
	// memory reserved whole on the first line.
	minLogFlushInterval = 10 * time.Millisecond
	maxLogBufferSize    = 1 << 30 // bytes
)

// BufferedWriter is the log writer module caddy.logging.writers.buffered: it
// opens the writer given in Output and writes to it through an in-memory
// buffer of Size bytes, flushed every FlushInterval, when full, and on close.
//
// Caddyfile (inside a `log` block):
//
//	output buffered {
//		flush_interval 1s
//		size 256KiB
//		output file /var/log/supervaizer/audit.log {
//			roll_size 100MiB
//		}
//	}
type BufferedWriter struct {
	// FlushInterval is the longest a line waits in the buffer (a duration;
	// default 1s). It bounds what a killed process loses.
	FlushInterval caddy.Duration `json:"flush_interval,omitempty"`

	// Size is the buffer's size in bytes (default 262144, 256 KiB); a full
	// buffer is written at once, on the writing goroutine.
	Size int `json:"size,omitempty"`

	// WriterRaw is the wrapped log writer (a caddy.logging.writers module,
	// e.g. {"output": "file", "filename": "..."}); required. Its JSON name
	// is "writer" because "output" names this module itself.
	WriterRaw json.RawMessage `json:"writer,omitempty" caddy:"namespace=caddy.logging.writers inline_key=output"`

	inner caddy.WriterOpener
}

// CaddyModule returns the Caddy module information.
func (BufferedWriter) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.logging.writers.buffered",
		New: func() caddy.Module { return new(BufferedWriter) },
	}
}

// Provision loads the wrapped writer and applies the defaults.
func (bw *BufferedWriter) Provision(ctx caddy.Context) error {
	if bw.WriterRaw == nil {
		return fmt.Errorf("buffered log writer: output is required (the writer to buffer, e.g. output file <path>)")
	}
	mod, err := ctx.LoadModule(bw, "WriterRaw")
	if err != nil {
		return fmt.Errorf("buffered log writer: loading output: %w", err)
	}
	bw.inner = mod.(caddy.WriterOpener)
	if bw.FlushInterval == 0 {
		bw.FlushInterval = caddy.Duration(defaultLogFlushInterval)
	}
	if bw.Size == 0 {
		bw.Size = defaultLogBufferSize
	}
	return nil
}

// Validate refuses an interval under 10ms, a size outside 1 byte..1GiB
// and a buffer wrapping a buffer.
func (bw *BufferedWriter) Validate() error {
	if time.Duration(bw.FlushInterval) < minLogFlushInterval {
		return fmt.Errorf("buffered log writer: flush_interval must be at least %s, got %s", minLogFlushInterval, time.Duration(bw.FlushInterval))
	}
	if bw.Size < 1 || bw.Size > maxLogBufferSize {
		return fmt.Errorf("buffered log writer: size must be between 1 and %d bytes (1GiB), got %d", maxLogBufferSize, bw.Size)
	}
	if _, nested := bw.inner.(*BufferedWriter); nested {
		return fmt.Errorf("buffered log writer: output is itself buffered")
	}
	return nil
}

// String names the wrapped writer, e.g. "buffered /var/log/audit.log".
func (bw *BufferedWriter) String() string { return "buffered " + bw.inner.String() }

// WriterKey identifies the buffered writer among the open ones: the wrapped
// writer's key and the buffer's settings, so that a reload changing them
// opens a new buffer (and closes, hence flushes, the old one).
func (bw *BufferedWriter) WriterKey() string {
	return "buffered:" + strconv.Itoa(bw.Size) + ":" + time.Duration(bw.FlushInterval).String() + ":" + bw.inner.WriterKey()
}

// OpenWriter opens the wrapped writer and puts the buffer in front of it.
func (bw *BufferedWriter) OpenWriter() (io.WriteCloser, error) {
	w, err := bw.inner.OpenWriter()
	if err != nil {
		return nil, err
	}
	b := &bufferedLog{
		ws:    &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(w), Size: bw.Size, FlushInterval: time.Duration(bw.FlushInterval)},
		inner: w,
	}
	openBuffers.add(b)
	return b, nil
}

// openBuffers are the buffered writers not closed yet; a graceful process
// exit flushes them all.
var openBuffers bufferSet

type bufferSet struct {
	mu     sync.Mutex
	set    map[*bufferedLog]struct{}
	onExit sync.Once
}

func (s *bufferSet) add(b *bufferedLog) {
	s.onExit.Do(func() { caddy.OnExit(func(context.Context) { s.drainAll() }) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		s.set = map[*bufferedLog]struct{}{}
	}
	s.set[b] = struct{}{}
}

func (s *bufferSet) remove(b *bufferedLog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.set, b)
}

// drainAll writes out every open buffer and makes later lines direct
// writes (at process exit).
func (s *bufferSet) drainAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for b := range s.set {
		b.drain()
	}
}

// bufferedLog is an open buffered writer. Close flushes, stops the flush
// timer, then closes the wrapped writer; it is called once per open (by
// Caddy's writer pool), and again is a no-op. After drain (at process exit)
// it writes straight through: Caddy still logs after its exit hooks.
type bufferedLog struct {
	mu     sync.RWMutex // Write holds it shared; drain and Close exclusively
	direct bool         // drained: lines go straight to inner
	ws     *zapcore.BufferedWriteSyncer
	inner  io.WriteCloser
	once   sync.Once
	err    error
}

func (b *bufferedLog) Write(p []byte) (int, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.direct {
		return b.inner.Write(p)
	}
	return b.ws.Write(p)
}

// Sync writes what the buffer holds (zapcore.WriteSyncer: zap calls it after
// an entry at level panic or fatal).
func (b *bufferedLog) Sync() error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.direct {
		return nil
	}
	return b.ws.Sync()
}

// drain writes what the buffer holds, stops its timer and makes every later
// line a direct write (at process exit: nothing logged after it is lost).
func (b *bufferedLog) drain() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.direct {
		_ = b.ws.Stop()
		b.direct = true
	}
}

func (b *bufferedLog) Close() error {
	b.once.Do(func() {
		openBuffers.remove(b)
		b.drain()
		b.err = b.inner.Close()
	})
	return b.err
}

// UnmarshalCaddyfile sets up the writer from Caddyfile tokens:
//
//	output buffered {
//		flush_interval <duration>
//		size <bytes, e.g. 256KiB>
//		output <writer> [<args...>] [{ ... }]
//	}
func (bw *BufferedWriter) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the writer's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "flush_interval":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v, err := caddy.ParseDuration(d.Val())
			if err != nil || v < minLogFlushInterval {
				return d.Errf("flush_interval: a duration of at least %s, got %q", minLogFlushInterval, d.Val())
			}
			bw.FlushInterval = caddy.Duration(v)
		case "size":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v, err := humanize.ParseBytes(d.Val())
			if err != nil || v == 0 || v > maxLogBufferSize {
				return d.Errf("size: a size in bytes between 1 and 1GiB (e.g. 256KiB), got %q", d.Val())
			}
			bw.Size = int(v)
		case "output":
			if bw.WriterRaw != nil {
				return d.Err("buffered writer: output given twice")
			}
			raw, err := unmarshalLogOutput(d)
			if err != nil {
				return err
			}
			bw.WriterRaw = raw
		default:
			return d.Errf("unrecognized buffered writer subdirective %q (flush_interval, size, output)", d.Val())
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	if bw.WriterRaw == nil {
		return d.Err("buffered writer: output <writer> is required")
	}
	return nil
}

// unmarshalLogOutput reads `output <writer> [args] [{block}]` as Caddy's own
// log directive does: the three standard writers by name, any other through
// its module's Caddyfile unmarshaler.
func unmarshalLogOutput(d *caddyfile.Dispenser) (json.RawMessage, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	name := d.Val()
	var wo caddy.WriterOpener
	switch name {
	case "stdout":
		wo = caddy.StdoutWriter{}
	case "stderr":
		wo = caddy.StderrWriter{}
	case "discard":
		wo = caddy.DiscardWriter{}
	default:
		unm, err := caddyfile.UnmarshalModule(d, "caddy.logging.writers."+name)
		if err != nil {
			return nil, err
		}
		var ok bool
		if wo, ok = unm.(caddy.WriterOpener); !ok {
			return nil, d.Errf("module %s (%T) is not a log writer", name, unm)
		}
	}
	return caddyconfig.JSONModuleObject(wo, "output", name, nil), nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*BufferedWriter)(nil)
	_ caddy.Validator       = (*BufferedWriter)(nil)
	_ caddy.WriterOpener    = (*BufferedWriter)(nil)
	_ caddyfile.Unmarshaler = (*BufferedWriter)(nil)
	_ zapcore.WriteSyncer   = (*bufferedLog)(nil)
)
