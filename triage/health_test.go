package triage_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
	"github.com/extractq/extractq/triage"
)

// TestReadyz: GET /readyz answers 200 while the database answers, and
// 503 naming Postgres when it does not (a pool on a port where no server
// listens), on the health mux cmd/triage serves apart from the UI and on
// the server's own routes.
func TestReadyz(t *testing.T) {
	t.Parallel()
	get := func(h http.Handler, path string) (int, string) {
		t.Helper()
		srv := httptest.NewServer(h)
		defer srv.Close()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	up := storetest.NewStore(t)
	if status, body := get(triage.HealthMux(up), "/readyz"); status != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz with the database up: %d %q, want 200 ready", status, body)
	}
	if status, _ := get(triage.HealthMux(up), "/healthz"); status != http.StatusOK {
		t.Errorf("/healthz: %d, want 200", status)
	}
	s, err := triage.New(triage.Config{Store: up, Schemas: loadSchemas(t), LocalOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/readyz", nil)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "ready\n" {
		t.Errorf("/readyz on the server's routes: %d %q, want 200 ready", rec.Code, rec.Body.String())
	}

	// A port nothing listens on: taken, then freed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@"+addr+"/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	down := &store.Store{Pool: pool}
	if status, body := get(triage.HealthMux(down), "/readyz"); status != http.StatusServiceUnavailable || !strings.Contains(body, "Postgres is unreachable") {
		t.Errorf("/readyz with the database down: %d %q, want 503 naming Postgres", status, body)
	}
	if status, _ := get(triage.HealthMux(down), "/healthz"); status != http.StatusOK {
		t.Errorf("/healthz with the database down: %d, want 200 (the process lives)", status)
	}
}
