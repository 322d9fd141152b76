package llmsim

import (
	"maps"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// StatusClientGone is the status Stats counts for a chat call whose caller
// went away (its context ended) before the reply was written.
const StatusClientGone = 499

// Stats are the simulator's counters since New, over POST
// /v1/chat/completions calls only. GET /admin/stats serves them as JSON.
type Stats struct {
	// Requests is every chat call received, whatever its answer.
	Requests int64 `json:"requests"`
	// ByStatus counts the calls by HTTP status (JSON keys are the codes as
	// text, "200"); StatusClientGone for callers that went away.
	ByStatus map[int]int64 `json:"by_status"`
	// PromptTokens and CompletionTokens sum the usage of the 200 replies
	// (the simulator's estimate).
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// Limited counts the 429 answers: the enforced limits' and the
	// injected rate_limited faults'.
	Limited int64 `json:"limited"`
	// Faults counts the faults applied, by name: reply faults
	// (invalid_json, fenced, ...), transport faults (rate_limited,
	// server_error, forbidden_html) and "outage" for calls refused during
	// an outage. Enforced limits are counted in Limited only.
	Faults map[Fault]int64 `json:"faults"`
	// OutageRemainingMS is how long the outage in course lasts, in
	// milliseconds; 0 for none.
	OutageRemainingMS int64 `json:"outage_remaining_ms"`
}

// counters is the mutable side of Stats.
type counters struct {
	mu                       sync.Mutex
	requests                 int64
	byStatus                 map[int]int64
	promptTok, completionTok int64
	limited                  int64
	faults                   map[Fault]int64
}

func (c *counters) record(status int, fault Fault, promptTok, complTok int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byStatus == nil {
		c.byStatus = make(map[int]int64)
		c.faults = make(map[Fault]int64)
	}
	c.requests++
	c.byStatus[status]++
	if status == http.StatusTooManyRequests {
		c.limited++
	}
	if fault != "" && fault != FaultNone {
		c.faults[fault]++
	}
	if status == http.StatusOK {
		c.promptTok += int64(promptTok)
		c.completionTok += int64(complTok)
	}
}

// Stats returns a copy of the counters. It is safe for concurrent use.
func (s *Server) Stats() Stats {
	s.stats.mu.Lock()
	st := Stats{
		Requests:         s.stats.requests,
		ByStatus:         maps.Clone(s.stats.byStatus),
		PromptTokens:     s.stats.promptTok,
		CompletionTokens: s.stats.completionTok,
		Limited:          s.stats.limited,
		Faults:           maps.Clone(s.stats.faults),
	}
	s.stats.mu.Unlock()
	if st.ByStatus == nil {
		st.ByStatus = map[int]int64{}
	}
	if st.Faults == nil {
		st.Faults = map[Fault]int64{}
	}
	st.OutageRemainingMS = s.outageLeft(time.Now()).Milliseconds()
	return st
}

// callRecord is what one chat call reports to the counters. The handler
// fills it; chatCompletions records it with the status written.
type callRecord struct {
	fault               Fault
	promptTok, complTok int
}

// statusWriter remembers the status a handler writes.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// adminOutage serves POST /admin/outage?seconds=N.
func (s *Server) adminOutage(w http.ResponseWriter, r *http.Request) {
	secs, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
	if err != nil || secs < 0 || math.IsInf(secs, 0) || math.IsNaN(secs) || secs > 1e6 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_seconds", "seconds",
			"seconds must be a number of seconds from 0 (end the outage) to 1000000")
		return
	}
	d := time.Duration(secs * float64(time.Second))
	s.SetOutage(d)
	s.log.Info("outage set (test endpoint)", zap.Float64("seconds", secs))
	writeJSON(w, http.StatusOK, map[string]any{"outage": d > 0, "seconds": secs})
}

// adminStats serves GET /admin/stats.
func (s *Server) adminStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}
