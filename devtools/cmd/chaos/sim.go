package main

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/llmsim"
)

// simulator runs the LLM simulator (package llmsim) in the harness's own
// process, with a log-normal latency per chat call. Its count of the calls
// it answered (HTTP 200; a caller that went away mid-call, such as a killed
// worker, is not answered), against the llm_calls rows, is how the harness
// measures calls whose outcome was never committed.
type simulator struct {
	srv    *llmsim.Server
	ln     net.Listener
	cancel context.CancelFunc
	done   chan struct{}
}

// newSimulator listens on 127.0.0.1:port with the simulator's cfg and the
// latency median and p99.
func newSimulator(cfg config.Simulator, median, p99 time.Duration, seed int64, port int) (*simulator, error) {
	cfg.Latency, cfg.LatencyMedian, cfg.LatencyP99, cfg.Seed = 0, median, p99, seed
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &simulator{srv: llmsim.New(cfg, nil), ln: ln, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		// A listener failure shows as the workers' failed calls.
		_ = s.srv.Serve(ctx, ln)
	}()
	return s, nil
}

// baseURL is the OpenAI-compatible base URL, ending in /v1.
func (s *simulator) baseURL() string { return "http://" + s.ln.Addr().String() + "/v1" }

// requests and served count the chat calls received and answered (200).
func (s *simulator) requests() int64 { return s.srv.Stats().Requests }
func (s *simulator) served() int64   { return s.srv.Stats().ByStatus[http.StatusOK] }

// close stops serving, letting calls in flight finish.
func (s *simulator) close() {
	s.cancel()
	<-s.done
}
