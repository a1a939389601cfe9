package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shared-subscription tuning.
const (
	// waitPingEvery: an idle subscription is checked with a PING this often;
	// no answer within the confirmation bound (DialTimeout+ReadTimeout)
	// breaks it (half-open TCP).
	waitPingEvery = 10 * time.Second
	// waitBackoffMax caps the pause between two subscription attempts while
	// Redis is unreachable.
	waitBackoffMax = 2 * time.Second
)

// waitHub is the one pub/sub subscription shared by every Wait of a
// RedisStore: one PSUBSCRIBE to "<prefix>{*}:done" on one connection, read by
// one dispatcher goroutine that wakes the waiters registered for the channel
// of each message. The number of Redis connections therefore does not grow
// with the number of waiters (issue #12, "300 waiters open 300 Redis
// connections").
//
// The dispatcher starts with the first Wait and lives until close. Each
// session is a fresh go-redis PubSub; when it breaks (read error, no PONG) the
// hub is marked not ready, every registered waiter is woken (it re-checks the
// key: a message may have been lost with the connection) and a new session
// starts after a backoff (100 ms doubling to waitBackoffMax, which is also
// the retry period while Redis is unreachable).
type waitHub struct {
	client    redis.UniversalClient
	pattern   string
	confirm   time.Duration // how long a waiter waits for a confirmed subscription
	pingEvery time.Duration // waitPingEvery; shorter in tests
	pongWait  time.Duration // how long a PING may go unanswered (confirm)

	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	done   chan struct{} // closed when the dispatcher has returned

	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{} // by channel
	ready   chan struct{}                   // closed while a session is confirmed
	isReady bool
	lastErr error         // why the last session ended, for waiters' errors
	ps      *redis.PubSub // current session, closed by close
	started bool
	closed  bool

	registrations atomic.Int64 // total register calls (tests)
	sessions      atomic.Int64 // total subscription sessions started (tests)
}

// waiter is one Wait call; wake has room for one signal.
type waiter struct{ wake chan struct{} }

func newWaitHub(client redis.UniversalClient, pattern string, confirm time.Duration) *waitHub {
	ctx, cancel := context.WithCancel(context.Background())
	return &waitHub{
		client: client, pattern: pattern, confirm: confirm, pingEvery: waitPingEvery, pongWait: confirm,
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
		waiters: map[string]map[*waiter]struct{}{},
		ready:   make(chan struct{}),
	}
}

// register adds a waiter for channel and returns it with the ready channel of
// the current session (closed once the subscription is confirmed). Both are
// taken under one lock: a session that breaks after this call wakes w. It
// starts the dispatcher on first use. Error: ErrClosed after close.
func (h *waitHub) register(channel string) (*waiter, <-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, ErrClosed
	}
	if !h.started {
		h.started = true
		go h.run()
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	set := h.waiters[channel]
	if set == nil {
		set = map[*waiter]struct{}{}
		h.waiters[channel] = set
	}
	set[w] = struct{}{}
	h.registrations.Add(1)
	return w, h.ready, nil
}

func (h *waitHub) unregister(channel string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.waiters[channel]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(h.waiters, channel)
		}
	}
}

// count returns the number of registered waiters (tests).
func (h *waitHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, set := range h.waiters {
		n += len(set)
	}
	return n
}

// awaitReady waits until ready is closed (the subscription is confirmed),
// bounded by h.confirm. Errors: ctx.Err(); a refusal (CodeStoreUnavailable)
// wrapping ErrClosed after close, or the last session error when the
// subscription is not confirmed in time.
func (h *waitHub) awaitReady(ctx context.Context, ready <-chan struct{}) error {
	select {
	case <-ready:
		return nil
	default:
	}
	t := time.NewTimer(h.confirm)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-h.ctx.Done():
		return errStoreUnavailable(ErrClosed)
	case <-t.C:
		h.mu.Lock()
		cause := h.lastErr
		h.mu.Unlock()
		if cause == nil {
			cause = errors.New("no confirmation from Redis")
		}
		return errStoreUnavailable(fmt.Errorf("pub/sub subscription not confirmed within %s: %w", h.confirm, cause))
	}
}

// run is the dispatcher: sessions until close, with a backoff between them.
func (h *waitHub) run() {
	defer close(h.done)
	backoff := 100 * time.Millisecond
	for h.ctx.Err() == nil {
		confirmed, err := h.session()
		h.broken(err)
		if confirmed {
			backoff = 100 * time.Millisecond
		}
		t := time.NewTimer(backoff)
		select {
		case <-h.ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if backoff *= 2; backoff > waitBackoffMax {
			backoff = waitBackoffMax
		}
	}
}

// session subscribes once and dispatches messages until the connection
// breaks or the hub closes. confirmed tells whether the subscription was
// confirmed at least once.
func (h *waitHub) session() (confirmed bool, err error) {
	h.sessions.Add(1)
	ps := h.client.PSubscribe(h.ctx, h.pattern)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = ps.Close()
		return false, ErrClosed
	}
	h.ps = ps
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.ps = nil
		h.mu.Unlock()
		_ = ps.Close()
	}()

	pinged := false
	for {
		timeout := h.pingEvery
		if pinged {
			timeout = h.pongWait
		}
		msg, err := ps.ReceiveTimeout(h.ctx, timeout)
		if err != nil {
			var ne net.Error
			timedOut := errors.As(err, &ne) && ne.Timeout()
			if timedOut && pinged {
				return confirmed, fmt.Errorf("pub/sub: no answer to PING within %s: %w", h.pongWait, err)
			}
			if !timedOut || h.ctx.Err() != nil {
				return confirmed, err
			}
			// Idle: check the connection with a PING.
			if err := ps.Ping(h.ctx); err != nil {
				return confirmed, err
			}
			pinged = true
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "psubscribe" {
				confirmed = true
				h.setReady()
			}
		case *redis.Message:
			h.deliver(m.Channel)
		}
	}
}

// isConfirmed reports whether the current subscription is confirmed (tests).
func (h *waitHub) isConfirmed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.isReady
}

func (h *waitHub) setReady() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.isReady {
		h.isReady = true
		h.lastErr = nil
		close(h.ready)
	}
}

// deliver wakes the waiters of channel.
func (h *waitHub) deliver(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[channel] {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// broken marks the subscription not ready and wakes every waiter: a message
// may have been lost with the connection, so each re-checks its key.
func (h *waitHub) broken(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
	if h.isReady {
		h.isReady = false
		h.ready = make(chan struct{})
	}
	for _, set := range h.waiters {
		for w := range set {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// close stops the dispatcher and waits for it to return. Waiters return an
// a refusal wrapping ErrClosed. Safe to call twice.
func (h *waitHub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.cancel()
	if h.ps != nil {
		_ = h.ps.Close() // unblocks the dispatcher's read
	}
	started := h.started
	h.mu.Unlock()
	if started {
		<-h.done
	}
}
