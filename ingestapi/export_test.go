package ingestapi

// Busy returns how many POSTs hold one of MaxRequests: tests wait for a
// request to be in flight with it.
func (s *Server) Busy() int { return len(s.sem) }

// Reading returns how many POSTs are past the readiness check, reading
// their body: a test that shuts down with a request in flight waits for
// it, as a request that has a slot but is not yet past the check is
// refused once the shutdown begins.
func (s *Server) Reading() int { return int(s.reading.Load()) }
