package main

import (
	"context"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/llmsim"
)

// simulator serves the LLM simulator (package llmsim) in the harness's own
// process, in front of it a log-normal latency per chat call and a count
// of the calls it answered: that count, against the llm_calls rows, is how
// the harness measures calls whose outcome was never committed.
type simulator struct {
	h      http.Handler
	median time.Duration
	sigma  float64 // of the log-normal: ln(p99/median) / z(0.99)
	srv    *http.Server
	ln     net.Listener
	done   chan struct{}

	mu  sync.Mutex
	rng *rand.Rand

	requests atomic.Int64 // chat completion requests received
	served   atomic.Int64 // chat completion requests answered 200
}

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// newSimulator listens on 127.0.0.1:port with the simulator's cfg (its own
// latency settings are not used: the harness applies median and p99).
func newSimulator(cfg config.Simulator, median, p99 time.Duration, seed int64, port int) (*simulator, error) {
	cfg.Latency, cfg.LatencyMedian, cfg.LatencyP99 = 0, 0, 0
	s := &simulator{
		h:      llmsim.New(cfg, nil),
		median: median,
		rng:    rand.New(rand.NewPCG(uint64(seed), 0x5eed)),
		done:   make(chan struct{}),
	}
	if median > 0 && p99 > median {
		s.sigma = math.Log(float64(p99)/float64(median)) / z99
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		// Serve ends with ErrServerClosed at close; a listener failure
		// shows as the workers' failed calls.
		s.srv.Serve(ln)
	}()
	return s, nil
}

// baseURL is the OpenAI-compatible base URL, ending in /v1.
func (s *simulator) baseURL() string { return "http://" + s.ln.Addr().String() + "/v1" }

// latency draws one call's latency.
func (s *simulator) latency() time.Duration {
	if s.median <= 0 {
		return 0
	}
	s.mu.Lock()
	z := s.rng.NormFloat64()
	s.mu.Unlock()
	return time.Duration(float64(s.median) * math.Exp(s.sigma*z))
}

// ServeHTTP waits the latency, then lets the simulator answer. A caller
// that goes away during the wait (a killed worker) gets no answer and is
// not counted.
func (s *simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		s.h.ServeHTTP(w, r)
		return
	}
	s.requests.Add(1)
	t := time.NewTimer(s.latency())
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	s.h.ServeHTTP(sw, r)
	if sw.status == http.StatusOK {
		s.served.Add(1)
	}
}

// close stops serving, waiting up to 5s for calls in flight.
func (s *simulator) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
	<-s.done
}

// statusWriter records the status of a response.
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
