package redact

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://usr9:pss9@studio.test/jwks.json?token=abc&v=2#frag":                "https://studio.test/jwks.json?token=REDACTED&v=REDACTED",
		"https://usr9@studio.test/jwks.json":                                        "https://studio.test/jwks.json",
		"redis://default:s3cret@redis:6379/0?password=p2&dial_timeout=1s":           "redis://redis:6379/0?password=REDACTED&dial_timeout=REDACTED",
		"redis-sentinel://usr9:pss9@h1:26379,h2:26379/mymaster?sentinel_password=x": "redis-sentinel://h1:26379,h2:26379/mymaster?sentinel_password=REDACTED",
		"http://127.0.0.1:8000":                                                     "http://127.0.0.1:8000",
		"http://h/p?flag":                                                           "http://h/p?flag=REDACTED",
		"http://h/p?":                                                               "http://h/p",
		"http://h/p?a=1;b=2":                                                        "http://h/p?a=REDACTED&b=REDACTED",
		"unix://:pw@/tmp/redis.sock?db=1":                                           "unix:///tmp/redis.sock?db=REDACTED",
		"user:password@host":                                                        Unparsable,
		"not a url":                                                                 Unparsable,
		"s3cr3t-typed-here":                                                         Unparsable,
		"":                                                                          Unparsable,
		" https://u:p@h/x?k=v ":                                                     "https://h/x?k=REDACTED",
	} {
		got := URL(raw)
		if got != want {
			t.Errorf("URL(%q) = %q, want %q", raw, got, want)
		}
		for _, secret := range []string{"usr9", "pss9", "s3cret", "p2", "abc", ":pw@", "frag"} {
			if strings.Contains(raw, secret) && strings.Contains(got, secret) {
				t.Errorf("URL(%q) = %q keeps %q", raw, got, secret)
			}
		}
	}
}

func TestURLsIn(t *testing.T) {
	in := `Get "https://alice:pw@studio.test/jwks.json?token=t0k": dial tcp: refused; also redis://bob@r:6379/0?password=x`
	got := URLsIn(in)
	want := `Get "https://studio.test/jwks.json?token=REDACTED": dial tcp: refused; also redis://r:6379/0?password=REDACTED`
	if got != want {
		t.Errorf("URLsIn = %q, want %q", got, want)
	}
	if s := "no url here"; URLsIn(s) != s {
		t.Error("a text without URL changed")
	}
}

// TestError: the error net/http's client returns embeds the full URL; Error
// prints it redacted, keeps errors.Is working, and wraps other errors whose
// text carries a URL.
func TestError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://alice:pw@127.0.0.1:9/jwks.json?token=t0k", nil)
	_, err := http.DefaultClient.Do(req)
	if err == nil {
		t.Skip("something listens on 127.0.0.1:9")
	}
	if !strings.Contains(err.Error(), "t0k") {
		t.Fatalf("precondition: net/http's error %q does not embed the URL", err)
	}
	red := Error(err)
	if s := red.Error(); strings.Contains(s, "t0k") || strings.Contains(s, "alice") || !strings.Contains(s, "token=REDACTED") {
		t.Errorf("Error(url.Error) = %q", s)
	}
	var ue *url.Error
	if !errors.As(red, &ue) {
		t.Error("the redacted transport error is no longer a *url.Error")
	}
	wrapped := Error(errors.Join(errors.New("jwks"), err))
	if s := wrapped.Error(); strings.Contains(s, "t0k") || strings.Contains(s, "alice") {
		t.Errorf("Error(joined) = %q", s)
	}
	if !errors.Is(wrapped, err) {
		t.Error("the wrapped error lost its cause")
	}
	plain := errors.New("no url")
	if Error(plain) != plain || Error(nil) != nil {
		t.Error("an error without URL is not returned as it is")
	}
}
