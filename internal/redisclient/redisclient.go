// Package redisclient is the one construction of a go-redis client for
// the state the sidecar keeps in Redis (the idempotency store, the limits'
// rate state): one server, a primary found through Sentinel, or a Cluster,
// from a URL in the syntax of its mode, with the same timeouts, retries
// and redaction of every error, and the sticky connection to a key's
// primary that Redis WAIT needs. It knows nothing of what is stored.
package redisclient

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// Redis modes (Options.Mode).
const (
	// ModeSingle: one Redis server, URL in redis.ParseURL syntax
	// ("redis://[:password@]host:6379/0").
	ModeSingle = "single"
	// ModeSentinel: a primary found through Redis Sentinel, URL in
	// redis.ParseFailoverURL syntax
	// ("redis://[:sentinel-password@]sentinel1:26379/0?master_name=mymaster&addr=sentinel2:26379",
	// the primary's own password in the query as password=...).
	ModeSentinel = "sentinel"
	// ModeCluster: a Redis Cluster, URL in redis.ParseClusterURL syntax
	// ("redis://[:password@]node1:7000?addr=node2:7001"); no database number.
	ModeCluster = "cluster"
)

// Defaults.
const (
	DefaultDialTimeout = 2 * time.Second // one connection attempt
	DefaultReadTimeout = 2 * time.Second // one reply; a write defaults to it too
	// DefaultReplicaAckTimeout bounds one Redis WAIT of its users'
	// min_replicas_ack settings.
	DefaultReplicaAckTimeout = 500 * time.Millisecond
)

// Options are what New reads: the mode, the URL in that mode's syntax
// (default mode ModeSingle) and the timeouts (zero: the URL's value, else
// the default).
type Options struct {
	Mode                                   string
	URL                                    string
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
}

// Settings are the timeouts a client was built with (defaults applied).
type Settings struct {
	Dial, Read, Write time.Duration
}

// PrimaryConn returns a sticky connection (not silently replaced when it
// breaks) to the primary that holds key: the client itself for single and
// Sentinel, the master of key's slot for a Cluster. Redis WAIT counts the
// writes of its own connection, so a write and its WAIT run on it. The
// caller closes it.
func PrimaryConn(ctx context.Context, client redis.UniversalClient, key string) (*redis.Conn, error) {
	var primary *redis.Client
	switch c := client.(type) {
	case *redis.ClusterClient:
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		primary = m
	case *redis.Client:
		primary = c
	default:
		return nil, fmt.Errorf("unsupported go-redis client %T", client)
	}
	return primary.Conn(), nil
}

// New builds the go-redis client of opts.Mode (single, Sentinel, Cluster)
// from opts.URL with opts' timeouts, and returns the timeouts in effect. It
// does not contact Redis. Errors start with what (the user: "idempotency",
// "limits") and name the mode and the URL's problem, the URL printed by the
// one redaction (internal/redact: no userinfo, query values REDACTED) and
// the library's text with the URL's passwords scrubbed; they never contain
// a password.
func New(what string, opts Options) (redis.UniversalClient, Settings, error) {
	var (
		c   redis.UniversalClient
		cs  Settings
		err error
	)
	switch opts.Mode {
	case "", ModeSingle:
		var ro *redis.Options
		if ro, err = redis.ParseURL(opts.URL); err == nil {
			cs = settle(opts, &ro.DialTimeout, &ro.ReadTimeout, &ro.WriteTimeout)
			ro.ContextTimeoutEnabled, ro.MaxRetries, ro.DialerRetries = true, 2, 1
			c = redis.NewClient(ro)
		}
	case ModeSentinel:
		var fo *redis.FailoverOptions
		if fo, err = redis.ParseFailoverURL(opts.URL); err == nil {
			if fo.MasterName == "" {
				err = errors.New("the master_name query parameter is missing")
				break
			}
			cs = settle(opts, &fo.DialTimeout, &fo.ReadTimeout, &fo.WriteTimeout)
			fo.ContextTimeoutEnabled, fo.MaxRetries, fo.DialerRetries = true, 2, 1
			c = redis.NewFailoverClient(fo)
		}
	case ModeCluster:
		var co *redis.ClusterOptions
		if co, err = parseClusterURL(opts.URL); err == nil {
			cs = settle(opts, &co.DialTimeout, &co.ReadTimeout, &co.WriteTimeout)
			co.ContextTimeoutEnabled, co.MaxRetries, co.DialerRetries = true, 2, 1
			c = redis.NewClusterClient(co)
		}
	default:
		return nil, cs, fmt.Errorf("%s: redis mode %q: want %q, %q or %q",
			what, opts.Mode, ModeSingle, ModeSentinel, ModeCluster)
	}
	if err != nil {
		mode := opts.Mode
		if mode == "" {
			mode = ModeSingle
		}
		return nil, cs, fmt.Errorf("%s: redis mode %s: URL %s: %s",
			what, mode, redact.URL(opts.URL), scrubSecrets(opts.URL, redact.URLsIn(err.Error())))
	}
	return c, cs, nil
}

// parseClusterURL is redis.ParseClusterURL, refusing a database path (a
// cluster has only database 0, and ParseClusterURL ignores the path).
func parseClusterURL(raw string) (*redis.ClusterOptions, error) {
	co, err := redis.ParseClusterURL(raw)
	if err != nil {
		return nil, err
	}
	if u, perr := url.Parse(raw); perr == nil && strings.Trim(u.Path, "/") != "" && strings.Trim(u.Path, "/") != "0" {
		return nil, errors.New("a cluster URL has no database number (got path " + u.Path + ")")
	}
	return co, nil
}

// settle applies Options' timeouts over the URL's: a field set in opts
// wins, else the URL's value, else the default (DefaultDialTimeout,
// DefaultReadTimeout; write = read).
func settle(opts Options, dial, read, write *time.Duration) Settings {
	if opts.DialTimeout > 0 {
		*dial = opts.DialTimeout
	} else if *dial == 0 {
		*dial = DefaultDialTimeout
	}
	if opts.ReadTimeout > 0 {
		*read = opts.ReadTimeout
	} else if *read == 0 {
		*read = DefaultReadTimeout
	}
	if opts.WriteTimeout > 0 {
		*write = opts.WriteTimeout
	} else if *write == 0 {
		*write = *read
	}
	return Settings{Dial: *dial, Read: *read, Write: *write}
}

// urlSecrets returns the passwords in raw: the userinfo's and the values of
// the password and sentinel_password query parameters, raw and unescaped.
func urlSecrets(raw string) []string {
	var s []string
	add := func(v string) {
		if v != "" {
			s = append(s, v)
			if u, err := url.QueryUnescape(v); err == nil && u != v {
				s = append(s, u)
			}
		}
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				add(rest[c+1 : at])
			}
		}
	}
	if q := strings.Index(raw, "?"); q >= 0 {
		for _, kv := range strings.FieldsFunc(raw[q+1:], func(r rune) bool { return r == '&' || r == ';' || r == '#' }) {
			k, v, _ := strings.Cut(kv, "=")
			if k == "password" || k == "sentinel_password" {
				add(v)
			}
		}
	}
	return s
}

// scrubSecrets replaces every password of raw (urlSecrets) in text by "xxxxx".
func scrubSecrets(raw, text string) string {
	for _, p := range urlSecrets(raw) {
		text = strings.ReplaceAll(text, p, "xxxxx")
	}
	return text
}
