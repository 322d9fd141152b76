package ingestapi

// Busy returns how many POSTs hold one of MaxRequests: tests wait for a
// request to be in flight with it.
func (s *Server) Busy() int { return len(s.sem) }
