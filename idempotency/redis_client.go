package idempotency

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

// Redis modes (RedisOptions.Mode).
const (
	// RedisModeSingle: one Redis server, URL in redis.ParseURL syntax
	// ("redis://[:password@]host:6379/0").
	RedisModeSingle = "single"
	// RedisModeSentinel: a primary found through Redis Sentinel, URL in
	// redis.ParseFailoverURL syntax
	// ("redis://[:sentinel-password@]sentinel1:26379/0?master_name=mymaster&addr=sentinel2:26379",
	// the primary's own password in the query as password=...).
	RedisModeSentinel = "sentinel"
	// RedisModeCluster: a Redis Cluster, URL in redis.ParseClusterURL syntax
	// ("redis://[:password@]node1:7000?addr=node2:7001"); no database number.
	RedisModeCluster = "cluster"
)

// clientSettings is what every mode sets on its go-redis options.
type clientSettings struct {
	dial, read, write time.Duration // resolved (defaults applied)
}

// NewRedisClient builds the go-redis client of opts.Mode (single, Sentinel,
// Cluster) from opts.URL with opts' timeouts, as the RedisStore does, for
// other state shared through the same Redis (the limits package). what
// names the user in errors ("limits"). It does not contact Redis. Only
// Mode, URL and the timeouts of opts are read.
func NewRedisClient(what string, opts RedisOptions) (redis.UniversalClient, error) {
	c, _, err := newRedisClient(what, opts)
	return c, err
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

// newRedisClient builds the go-redis client of opts.Mode from opts.URL.
// Errors start with what ("idempotency") and name the mode and the URL's
// problem, the URL printed by the one redaction (internal/redact: no
// userinfo, query values REDACTED) and the library's text with the URL's
// passwords scrubbed; they never contain a password.
func newRedisClient(what string, opts RedisOptions) (redis.UniversalClient, clientSettings, error) {
	var (
		c   redis.UniversalClient
		cs  clientSettings
		err error
	)
	switch opts.Mode {
	case "", RedisModeSingle:
		var ro *redis.Options
		if ro, err = redis.ParseURL(opts.URL); err == nil {
			cs = settle(opts, &ro.DialTimeout, &ro.ReadTimeout, &ro.WriteTimeout)
			ro.ContextTimeoutEnabled, ro.MaxRetries, ro.DialerRetries = true, 2, 1
			c = redis.NewClient(ro)
		}
	case RedisModeSentinel:
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
	case RedisModeCluster:
		var co *redis.ClusterOptions
		if co, err = parseClusterURL(opts.URL); err == nil {
			cs = settle(opts, &co.DialTimeout, &co.ReadTimeout, &co.WriteTimeout)
			co.ContextTimeoutEnabled, co.MaxRetries, co.DialerRetries = true, 2, 1
			c = redis.NewClusterClient(co)
		}
	default:
		return nil, cs, fmt.Errorf("%s: redis mode %q: want %q, %q or %q",
			what, opts.Mode, RedisModeSingle, RedisModeSentinel, RedisModeCluster)
	}
	if err != nil {
		mode := opts.Mode
		if mode == "" {
			mode = RedisModeSingle
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

// settle applies RedisOptions' timeouts over the URL's: a field set in opts
// wins, else the URL's value, else the default (DefaultRedisDialTimeout,
// DefaultRedisReadTimeout; write = read).
func settle(opts RedisOptions, dial, read, write *time.Duration) clientSettings {
	if opts.DialTimeout > 0 {
		*dial = opts.DialTimeout
	} else if *dial == 0 {
		*dial = DefaultRedisDialTimeout
	}
	if opts.ReadTimeout > 0 {
		*read = opts.ReadTimeout
	} else if *read == 0 {
		*read = DefaultRedisReadTimeout
	}
	if opts.WriteTimeout > 0 {
		*write = opts.WriteTimeout
	} else if *write == 0 {
		*write = *read
	}
	return clientSettings{dial: *dial, read: *read, write: *write}
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
