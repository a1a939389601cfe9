// The one duration type of the configuration: a JSON string in Go's
// duration syntax with days ("30s", "5m", "1d12h") or a JSON number of
// nanoseconds, as Caddy reads every duration of its own configuration.

package config

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Duration is a configured duration; it encodes as a number of
// nanoseconds.
type Duration time.Duration

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalJSON reads a duration string (ParseDuration) or a number of
// nanoseconds. A value of neither kind, or one past the largest duration,
// is a type error, which the decoder names by its setting (json.go).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var dur time.Duration
	var err error
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		dur, err = ParseDuration(strings.Trim(string(b), `"`))
	} else {
		err = json.Unmarshal(b, &dur)
	}
	if err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Duration]()}
	}
	*d = Duration(dur)
	return nil
}

// ParseDuration reads Go's duration syntax, in which a number may also be
// followed by d for days of 24 hours ("1d", "1.5d2h").
func ParseDuration(s string) (time.Duration, error) {
	if len(s) > 1024 {
		return 0, errors.New("parsing duration: input string too long")
	}
	var out strings.Builder
	start := -1 // where the number being read begins
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == 'd' && start >= 0:
			days, err := strconv.ParseFloat(s[start:i], 64)
			if err != nil {
				return 0, err
			}
			out.WriteString(strconv.FormatFloat(days*24, 'f', -1, 64) + "h")
			start = -1
			continue
		case (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+':
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			out.WriteString(s[start:i])
			start = -1
		}
		out.WriteByte(c)
	}
	if start >= 0 {
		out.WriteString(s[start:])
	}
	return time.ParseDuration(out.String())
}
