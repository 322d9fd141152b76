package triage

import "time"

// SetLoginClock makes the login limiter read the time from now, so a test
// decides when its tokens come back instead of the wall clock.
func (s *Server) SetLoginClock(now func() time.Time) {
	s.limMu.Lock()
	defer s.limMu.Unlock()
	s.limNow = now
}
