package ingest_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extractq/extractq/ingest"
)

// hostRequest is a request to se's listener with Host host ("" keeps the
// listener's address).
func (se *serverEnv) hostRequest(t *testing.T, method, path, host, contentType, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, se.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}

// Without a token, the server answers only requests naming a loopback
// Host: a page of another site, its name rebound to 127.0.0.1, sends its
// own name and is answered 421 on every route, with nothing stored.
func TestServeNoTokenLoopbackHostOnly(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, func(c *ingest.ServerConfig) { c.Token = ""; c.Registry = prometheus.NewRegistry() })
	u, err := url.Parse(se.base)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	line := `{"id": "h-1", "text": "Where is order 48213?"}` + "\n"
	erase := `{"by": "dpo", "messages": [{"source": "web", "id": "h-1"}]}`
	routes := []struct{ method, path, ctype, body string }{
		{"POST", "/v1/messages", ingest.ContentTypeNDJSON, line},
		{"GET", "/v1/batches/b-1", "", ""},
		{"GET", "/v1/batches/b-1/results", "", ""},
		{"POST", "/v1/erasures", ingest.ContentTypeJSON, erase},
		{"GET", "/healthz", "", ""},
		{"GET", "/readyz", "", ""},
		{"GET", "/metrics", "", ""},
		{"GET", "/nowhere", "", ""},
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example:" + port, "10.0.0.1:" + port,
		"0.0.0.0:" + port, "[::]:" + port} {
		for _, rt := range routes {
			r := do(t, se.hostRequest(t, rt.method, rt.path, host, rt.ctype, rt.body), "")
			wantError(t, rt.method+" "+rt.path+" Host "+host, r, http.StatusMisdirectedRequest, "misdirected_request",
				"answers only requests to a loopback host", "set a token")
		}
	}
	if n := se.countSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := se.streamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}

	// Loopback names are answered.
	for i, host := range []string{"", "127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "api.localhost:" + port, "127.0.0.2:" + port, "[::1]:" + port} {
		id := "h-" + string(rune('a'+i))
		r := do(t, se.hostRequest(t, "POST", "/v1/messages", host, ingest.ContentTypeNDJSON, strings.Replace(line, "h-1", id, 1)), "")
		if r.status != http.StatusOK || r.ans.Published != 1 {
			t.Errorf("POST with Host %q: %d %s, want 200 with 1 published", host, r.status, r.body)
		}
		if r := do(t, se.hostRequest(t, "GET", "/healthz", host, "", ""), ""); r.status != http.StatusOK {
			t.Errorf("GET /healthz with Host %q: %d %s", host, r.status, r.body)
		}
	}
}

// With a token, the token guards: any Host is answered.
func TestServeTokenAnyHost(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	req := se.hostRequest(t, "POST", "/v1/messages", "ingest.example.com", ingest.ContentTypeNDJSON, `{"id": "t-1", "text": "Where is order 48213?"}`)
	if r := do(t, req, "Bearer "+testToken); r.status != http.StatusOK || r.ans.Published != 1 {
		t.Errorf("POST with the token and Host ingest.example.com: %d %s", r.status, r.body)
	}
	req = se.hostRequest(t, "POST", "/v1/messages", "ingest.example.com", ingest.ContentTypeNDJSON, `{"id": "t-2", "text": "x"}`)
	wantError(t, "POST without the token", do(t, req, ""), http.StatusUnauthorized, "unauthorized")
}
