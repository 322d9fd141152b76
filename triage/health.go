package triage

import (
	"context"
	"net/http"
	"time"

	"github.com/extractq/extractq/store"
)

// readyTimeout bounds the database ping of GET /readyz.
const readyTimeout = 2 * time.Second

// ReadyHandler answers GET /readyz: 200 "ready" while the database
// answers a ping within 2s, else 503 "not ready: Postgres is unreachable"
// (the error itself, which may name the server, is not shown). Triage
// cannot show or decide an item without the database; NATS is not
// checked, as triage works without it (re-runs are left to the worker's
// sweeper). The server's own routes include it, and cmd/triage serves it
// on -metrics-addr too, where the probes reach it while the UI listens on
// loopback only.
func ReadyHandler(st *store.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := st.Pool.Ping(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: Postgres is unreachable\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}

// healthz answers GET /healthz: 200 while the process serves.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// HealthMux returns GET /healthz and GET /readyz (ReadyHandler) on a mux
// of their own, for a listener apart from the UI's.
func HealthMux(st *store.Store) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", ReadyHandler(st))
	return mux
}
