package llmsim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The transport faults: whole calls that fail before any reply is made,
// drawn per call (first calls and repairs alike). X-Llmsim-Fault carries
// them too.
const (
	FaultRateLimited   Fault = "rate_limited"   // 429 with Retry-After and an OpenAI error body
	FaultServerError   Fault = "server_error"   // 500 with an OpenAI error body
	FaultForbiddenHTML Fault = "forbidden_html" // 403 with an HTML page, as a proxy sends
	FaultOutage        Fault = "outage"         // 503 during an outage (SetOutage, POST /admin/outage)
)

// maxTracked bounds the try counter table: when it holds this many request
// bodies it is emptied, and every body's tries count from 1 again.
const maxTracked = 1 << 18

// tries counts, per request body, how many times the server has received
// it. The count is the "try" number that seeds the transport fault and the
// latency, so a retry of the same request is a new draw.
type tries struct {
	mu sync.Mutex
	n  map[[32]byte]uint32
}

// next records one more receipt of the body hashing to digest and returns
// its try number, from 1.
func (t *tries) next(digest [32]byte) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil || len(t.n) >= maxTracked {
		t.n = make(map[[32]byte]uint32)
	}
	t.n[digest]++
	return t.n[digest]
}

// tryRand returns the generator of one try, seeded from a hash of the
// configured seed, a purpose, the request body's digest and the try number.
func (s *Server) tryRand(digest [32]byte, try uint32, purpose string) *rand.Rand {
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(s.cfg.Seed))
	h.Write(b[:])
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write(digest[:])
	binary.LittleEndian.PutUint64(b[:], uint64(try))
	h.Write(b[:])
	sum := h.Sum(nil)
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
}

// transportFault draws the transport fault of one try: one uniform draw
// against the rates, cumulative in the order rate limited, server error,
// forbidden HTML. It returns FaultNone for a call that goes through.
func (s *Server) transportFault(digest [32]byte, try uint32) Fault {
	c := s.cfg
	if c.RateLimitedRate <= 0 && c.ServerErrorRate <= 0 && c.ForbiddenHTMLRate <= 0 {
		return FaultNone
	}
	u := s.tryRand(digest, try, "transport").Float64()
	for _, r := range []struct {
		f    Fault
		rate float64
	}{
		{FaultRateLimited, c.RateLimitedRate}, {FaultServerError, c.ServerErrorRate}, {FaultForbiddenHTML, c.ForbiddenHTMLRate},
	} {
		if u < r.rate {
			return r.f
		}
		u -= r.rate
	}
	return FaultNone
}

// retryAfter is the configured Retry-After of injected 429s; 0 means 1s.
func (s *Server) retryAfter() time.Duration {
	if s.cfg.RetryAfter > 0 {
		return s.cfg.RetryAfter
	}
	return time.Second
}

// setRetryAfter sets Retry-After (whole seconds, rounded up, at least 1)
// and retry-after-ms (milliseconds, rounded up) to d.
func setRetryAfter(h http.Header, d time.Duration) {
	secs := max(int64(math.Ceil(d.Seconds())), 1)
	ms := max(int64(math.Ceil(float64(d)/float64(time.Millisecond))), 0)
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(ms, 10))
}

// writeRateLimited answers an injected 429, as the provider does when it
// is overloaded: OpenAI's body with Retry-After for generic and openai;
// Ollama's 429 (fixture ollama/rate_limited.json, no Retry-After). vLLM
// and llama.cpp server document no 429 of their own: under their
// profiles the 429 is a gateway's in front of them, the generic one.
func (s *Server) writeRateLimited(w http.ResponseWriter, model string) {
	if s.prof == ProfileOllama {
		writeProfileError(w, s.prof, http.StatusTooManyRequests, errRateLimited, "", "", "", "rate limit exceeded")
		return
	}
	d := s.retryAfter()
	setRetryAfter(w.Header(), d)
	writeError(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "",
		fmt.Sprintf("Rate limit reached for %s (simulated). Please try again in %s.", model, formatReset(d)))
}

// writeServerError answers an injected 500 with the profile's error body
// (OpenAI's, code null, for generic and openai; fixtures
// <profile>/server_error.json).
func (s *Server) writeServerError(w http.ResponseWriter) {
	msg := "The server had an error while processing your request. Sorry about that! (simulated)"
	if s.prof == ProfileOllama {
		msg = "an error was encountered while running the model (simulated)"
	}
	writeProfileError(w, s.prof, http.StatusInternalServerError, errServer, "server_error", "", "", msg)
}

// forbiddenPage is the body of an injected 403: a proxy's page, not JSON.
const forbiddenPage = `<html>
<head><title>403 Forbidden</title></head>
<body>
<center><h1>403 Forbidden</h1></center>
<hr><center>proxy (extractq llmsim, simulated)</center>
</body>
</html>
`

// writeForbiddenHTML answers an injected 403 with an HTML page.
func writeForbiddenHTML(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write([]byte(forbiddenPage))
}

// outageState is the outage set with SetOutage or POST /admin/outage.
type outageState struct {
	mu    sync.Mutex
	until time.Time
}

// SetOutage makes every chat call fail with 503 for d from now; d <= 0
// ends an outage. It replaces any outage in course.
func (s *Server) SetOutage(d time.Duration) {
	s.outage.mu.Lock()
	defer s.outage.mu.Unlock()
	if d <= 0 {
		s.outage.until = time.Time{}
		return
	}
	s.outage.until = time.Now().Add(d)
}

// outageLeft returns how long the outage in course lasts from now, 0 for
// none.
func (s *Server) outageLeft(now time.Time) time.Duration {
	s.outage.mu.Lock()
	defer s.outage.mu.Unlock()
	return max(s.outage.until.Sub(now), 0)
}

// writeOutage answers a call during an outage: 503 without Retry-After,
// with OpenAI's server error body for generic, openai and vllm (vLLM
// documents no 503 body), Ollama's busy queue (fixture
// ollama/server_busy.json) and llama.cpp's loading model (fixture
// llamacpp/unavailable.json).
func (s *Server) writeOutage(w http.ResponseWriter) {
	w.Header().Set("X-Llmsim-Fault", string(FaultOutage))
	switch s.prof {
	case ProfileOllama:
		writeProfileError(w, s.prof, http.StatusServiceUnavailable, errUnavailable, "", "", "",
			"server busy, please try again.  maximum pending requests exceeded")
	case ProfileLlamaCpp:
		writeProfileError(w, s.prof, http.StatusServiceUnavailable, errUnavailable, "", "", "", "Loading model")
	default:
		writeError(w, http.StatusServiceUnavailable, "server_error", "", "",
			"The server is overloaded or not ready yet. (simulated outage)")
	}
}
