package ingestapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/internal/httperr"
)

// healthz is GET /healthz: 200 while the process is up.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// ready reports why the server cannot ingest now ("" when it can):
// Postgres does not answer a ping within 2s, or NATS is not connected.
// The error is the ping's.
func (s *Server) ready(ctx context.Context) (string, error) {
	if s.draining.Load() {
		return "the server is shutting down", nil
	}
	if !s.cfg.Conn.IsConnected() {
		return "NATS is not connected", nil
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.cfg.Store.Pool.Ping(pctx); err != nil {
		return "Postgres is unreachable", err
	}
	return "", nil
}

// readyz is GET /readyz: 200 while the server can ingest (ready), else
// 503 saying why.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	why, err := s.ready(r.Context())
	if why != "" {
		s.log.Debug("not ready", zap.String("why", why), zap.Error(err))
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		return &httperr.Error{Code: httperr.Unavailable, Message: why, Err: err}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

// Healthz and Readyz are GET /healthz and GET /readyz as the server
// answers them, for a listener apart from the API's (ingest serve
// -metrics-addr), so probes may use the port Prometheus scrapes.
func (s *Server) Healthz() http.Handler { return s.limitBody("GET /healthz", 0, s.handle(s.healthz)) }

// Readyz: see Healthz.
func (s *Server) Readyz() http.Handler { return s.limitBody("GET /readyz", 0, s.handle(s.readyz)) }
