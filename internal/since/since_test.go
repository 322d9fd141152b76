package since

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ok := map[string]time.Time{
		"":                     {},
		"  ":                   {},
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"36h":                  now.Add(-36 * time.Hour),
		"2w":                   now.Add(-14 * 24 * time.Hour),
		"1d12h":                now.Add(-36 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"2026-11-01":           time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		"2026-11-01T09:30:00Z": time.Date(2026, 11, 1, 9, 30, 0, 0, time.UTC),
	}
	for in, want := range ok {
		got, err := Parse(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"7 days", "yesterday", "-7d", "0s", "2026-13-01", "7x"} {
		_, err := Parse(in, now)
		if err == nil {
			t.Errorf("Parse(%q): no error", in)
			continue
		}
		if !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("Parse(%q): error %q does not name the input", in, err)
		}
	}
	// A duration too long for time.Duration is told apart from a typo.
	for in, want := range map[string]string{
		"99999999d": "at most about 292 years",
		"3000000w":  "at most about 292 years",
		"7dd":       "want a look-back duration such as 7d",
		"1.5.2h":    "want a look-back duration such as 7d",
	} {
		if _, err := Parse(in, now); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", in, err, want)
		}
	}
}
