package triage

import (
	"time"

	"golang.org/x/crypto/bcrypt"
)

// SetLoginClock makes the login limiter read the time from now, so a test
// decides when its tokens come back instead of the wall clock.
func (s *Server) SetLoginClock(now func() time.Time) {
	s.limMu.Lock()
	defer s.limMu.Unlock()
	s.limNow = now
}

// DummyHashCost returns the bcrypt cost of the hash a login that names
// no account is checked against.
func (s *Server) DummyHashCost() int {
	c, err := bcrypt.Cost(s.dummyHash)
	if err != nil {
		panic(err)
	}
	return c
}
