package cli

import (
	"testing"
	"time"
)

func TestMintTimes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		ttl, iat, exp, nbf string
		wantIat, wantExp   int64
		wantNbf            int64 // 0: absent
	}{
		{"10m", "", "", "", now.Unix(), now.Unix() + 600, 0},
		{"-5m", "", "", "", now.Unix(), now.Unix() - 300, 0},
		{"10m", "+10m", "", "", now.Unix() + 600, now.Unix() + 1200, 0},
		{"10m", "1700000000", "2026-01-01T00:00:00Z", "-1m", 1_700_000_000, 1_767_225_600, now.Unix() - 60},
	} {
		got, err := mintTimes(c.ttl, c.iat, c.exp, c.nbf, now)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got.iat != c.wantIat || got.exp != c.wantExp || (c.wantNbf == 0) != (got.nbf == nil) || (got.nbf != nil && *got.nbf != c.wantNbf) {
			t.Errorf("%+v: got %+v", c, got)
		}
	}
	for _, bad := range [][4]string{{"soon", "", "", ""}, {"10m", "tomorrow", "", ""}, {"10m", "", "5m", ""}, {"10m", "", "", "x"}} {
		if _, err := mintTimes(bad[0], bad[1], bad[2], bad[3], now); err == nil {
			t.Errorf("mintTimes(%q) accepted", bad)
		}
	}
}
