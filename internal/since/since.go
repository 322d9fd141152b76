// Package since reads the start of a report's time window as people write
// it: a look-back duration ("7d", "36h", "2w"), a date ("2026-11-01") or an
// RFC 3339 time ("2026-11-01T09:00:00Z").
package since

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/xhit/go-str2duration/v2"
)

// durationForm is the form of a look-back duration, which
// str2duration.ParseDuration refuses only when it overflows.
var durationForm = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h|d|w)(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h|d|w))*$`)

// Parse returns the time s names, with now as the end of a look-back
// duration. Durations take the units of go-str2duration (w, d, h, m, s,
// ms, ...; "1d12h" mixes them) and must be positive; a date is midnight
// UTC. An empty s returns the zero time (no window: all time). Anything
// else returns an error naming s and the accepted forms.
func Parse(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := str2duration.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("since %q: a look-back duration must be positive", s)
		}
		return now.Add(-d), nil
	}
	if durationForm.MatchString(s) {
		return time.Time{}, fmt.Errorf("since %q: a look-back duration can be at most about 292 years (time.Duration's range); for a longer one give a date such as 1970-01-01", s)
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since %q: want a look-back duration such as 7d or 36h, a date such as 2026-11-01, or an RFC 3339 time such as 2026-11-01T09:00:00Z", s)
}
