package ingestapi_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extractq/extractq/ingestapi"
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
	se := newServerEnv(t, nil, func(c *ingestapi.ServerConfig) { c.Token = ""; c.Registry = prometheus.NewRegistry() })
	u, err := url.Parse(se.base)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	line := `{"id": "h-1", "text": "Where is order 48213?"}` + "\n"
	erase := `{"by": "dpo", "messages": [{"source": "web", "id": "h-1"}]}`
	routes := []struct{ method, path, ctype, body string }{
		{"POST", "/v1/messages", ingestapi.ContentTypeNDJSON, line},
		{"GET", "/v1/batches/b-1", "", ""},
		{"GET", "/v1/batches/b-1/results", "", ""},
		{"POST", "/v1/erasures", ingestapi.ContentTypeJSON, erase},
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
	if n := se.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := se.StreamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}

	// Loopback names are answered.
	for i, host := range []string{"", "127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "api.localhost:" + port, "127.0.0.2:" + port, "[::1]:" + port} {
		id := "h-" + string(rune('a'+i))
		r := do(t, se.hostRequest(t, "POST", "/v1/messages", host, ingestapi.ContentTypeNDJSON, strings.Replace(line, "h-1", id, 1)), "")
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
	req := se.hostRequest(t, "POST", "/v1/messages", "ingest.example.com", ingestapi.ContentTypeNDJSON, `{"id": "t-1", "text": "Where is order 48213?"}`)
	if r := do(t, req, "Bearer "+testToken); r.status != http.StatusOK || r.ans.Published != 1 {
		t.Errorf("POST with the token and Host ingest.example.com: %d %s", r.status, r.body)
	}
	req = se.hostRequest(t, "POST", "/v1/messages", "ingest.example.com", ingestapi.ContentTypeNDJSON, `{"id": "t-2", "text": "x"}`)
	wantError(t, "POST without the token", do(t, req, ""), http.StatusUnauthorized, "unauthenticated")
}

// Every route caps its body before it is read: one that takes none
// refuses a body; POST /v1/erasures refuses a declared length over its
// limit before reading any of it; and no route takes a multipart body.
func TestServeBodyLimits(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, func(c *ingestapi.ServerConfig) { c.Registry = prometheus.NewRegistry() })
	auth := "Bearer " + testToken

	t.Run("NoBodyRoutes", func(t *testing.T) {
		for _, path := range []string{"/v1/batches/b-1", "/v1/batches/b-1/results", "/healthz", "/readyz", "/metrics"} {
			r := do(t, se.hostRequest(t, "GET", path, "", ingestapi.ContentTypeJSON, `{"x": 1}`), auth)
			wantError(t, "GET "+path+" with a body", r, http.StatusRequestEntityTooLarge, "too_large", "GET "+strings.Replace(path, "b-1", "{id}", 1)+" takes no body")
		}
	})

	t.Run("DeclaredTooLong", func(t *testing.T) {
		// Only the headers and the start of the body are sent: the answer
		// comes without the rest being read (for POST /v1/messages as
		// before; POST /v1/erasures read up to its limit first).
		for _, rt := range []struct {
			path, ctype   string
			length, limit int
		}{
			{"/v1/erasures", ingestapi.ContentTypeJSON, 2 << 20, 1 << 20},
			{"/v1/messages", ingestapi.ContentTypeNDJSON, ingestapi.DefaultMaxBodyBytes + 1, ingestapi.DefaultMaxBodyBytes},
		} {
			conn, err := net.Dial("tcp", strings.TrimPrefix(se.base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\nContent-Type: %s\r\n"+
				"Content-Length: %d\r\n\r\n{\"by\": \"dpo\", ", rt.path, auth, rt.ctype, rt.length)
			if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Errorf("POST %s: no answer before the body was sent: %v", rt.path, err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("the body is %d bytes; the limit is %d bytes", rt.length, rt.limit); resp.StatusCode != http.StatusRequestEntityTooLarge ||
				!strings.Contains(string(b), want) {
				t.Errorf("POST %s: answer %d %s, want 413 saying %q", rt.path, resp.StatusCode, b, want)
			}
		}
	})

	t.Run("ErasureChunkedTooLong", func(t *testing.T) {
		big := `{"by": "dpo", "reason": "` + strings.Repeat("x", 1<<20) + `", "messages": []}`
		req := se.hostRequest(t, "POST", "/v1/erasures", "", ingestapi.ContentTypeJSON, "")
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader(big)), 0 // sent chunked
		wantError(t, "chunked erasure body over 1 MiB", do(t, req, auth), http.StatusRequestEntityTooLarge, "too_large", "longer than the limit of 1048576 bytes")
	})

	t.Run("Multipart", func(t *testing.T) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, err := mw.CreateFormFile("file", "messages.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(fw, `{"id": "mp-1", "text": "Where is order 48213?"}`)
		if err := mw.Close(); err != nil {
			t.Fatal(err)
		}
		for _, rt := range []struct{ method, path string }{
			{"POST", "/v1/messages"}, {"POST", "/v1/erasures"}, {"GET", "/v1/batches/b-1"}, {"POST", "/v1/batches/b-1"}, {"POST", "/nowhere"},
		} {
			r := do(t, se.hostRequest(t, rt.method, rt.path, "", mw.FormDataContentType(), buf.String()), auth)
			wantError(t, rt.method+" "+rt.path+" multipart", r, http.StatusUnsupportedMediaType, "unsupported_media_type",
				`Content-Type "multipart/form-data": no route takes a multipart body`, "curl --data-binary @FILE")
		}
		r := do(t, se.hostRequest(t, "POST", "/v1/messages", "", "Multipart/Mixed ; boundary=x", "--x--"), auth)
		wantError(t, "multipart/mixed", r, http.StatusUnsupportedMediaType, "unsupported_media_type", `Content-Type "multipart/mixed"`)
	})

	if n := se.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	// A route's own body is still taken.
	if r := se.post(t, "", ingestapi.ContentTypeNDJSON, `{"id": "ok-1", "text": "Where is order 48213?"}`); r.status != http.StatusOK || r.ans.Published != 1 {
		t.Errorf("POST /v1/messages: %d %s", r.status, r.body)
	}
}

// A request from a web page of another origin is refused 403 before it
// is read, token or not: an Origin compared by scheme, host and port
// ("null" too), Sec-Fetch-Site, and a Referer when there is no Origin.
func TestServeCrossOrigin(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", testToken} {
		t.Run(map[string]string{"": "NoToken", testToken: "Token"}[token], func(t *testing.T) {
			t.Parallel()
			se := newServerEnv(t, nil, func(c *ingestapi.ServerConfig) { c.Token = token })
			auth := ""
			if token != "" {
				auth = "Bearer " + token
			}
			self := se.base // http://127.0.0.1:PORT
			u, _ := url.Parse(self)
			n := 0
			post := func(hdr map[string]string, ctype string) reply {
				t.Helper()
				n++
				req := se.hostRequest(t, "POST", "/v1/messages", "", ctype, fmt.Sprintf(`{"id": "o-%d", "text": "Where is order 48213?"}`, n))
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				return do(t, req, auth)
			}
			refused := []map[string]string{
				{"Origin": "http://evil.example"},
				{"Origin": "https://" + u.Host}, // https origin, http server
				{"Origin": "http://127.0.0.1:1"},
				{"Origin": "http://localhost:" + u.Port()}, // another host name is another origin
				{"Origin": "null"},                         // a sandboxed frame, a file
				{"Origin": ""},
				{"Origin": self, "Sec-Fetch-Site": "cross-site"},
				{"Sec-Fetch-Site": "same-site"},
				{"Referer": "http://evil.example/page.html"},
				{"Referer": "https://" + u.Host + "/"},
				{"Origin": self, "X-Forwarded-Proto": "https"}, // behind a TLS proxy, the origin is https
			}
			for _, hdr := range refused {
				wantError(t, fmt.Sprintf("POST with %v", hdr), post(hdr, ingestapi.ContentTypeNDJSON), http.StatusForbidden, "cross_origin",
					"from a page of another", "the API answers programs")
			}
			// The form a page can post without asking: text/plain.
			wantError(t, "POST text/plain from another origin", post(map[string]string{"Origin": "http://evil.example"}, "text/plain"),
				http.StatusForbidden, "cross_origin", `Origin "http://evil.example", not `+self)
			for _, path := range []string{"/v1/batches/b-1/results", "/v1/batches/b-1", "/healthz"} {
				req := se.hostRequest(t, "GET", path, "", "", "")
				req.Header.Set("Origin", "http://evil.example")
				wantError(t, "GET "+path+" from another origin", do(t, req, auth), http.StatusForbidden, "cross_origin")
			}
			req := se.hostRequest(t, "POST", "/v1/erasures", "", ingestapi.ContentTypeJSON, `{"by": "x", "messages": [{"id": "o-1"}]}`)
			req.Header.Set("Origin", "http://evil.example")
			wantError(t, "POST /v1/erasures from another origin", do(t, req, auth), http.StatusForbidden, "cross_origin")
			if n := se.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
				t.Errorf("%d batches recorded, want 0", n)
			}

			// Programs (no such header), and this server's own origin, are answered.
			for _, hdr := range []map[string]string{
				nil,
				{"Origin": self},
				{"Origin": "HTTP://" + strings.ToUpper(u.Host)},
				{"Origin": "https://" + u.Host, "X-Forwarded-Proto": "https"},
				{"Sec-Fetch-Site": "same-origin", "Origin": self},
				{"Sec-Fetch-Site": "none"},
				{"Referer": self + "/v1/batches/b-1"},
			} {
				if r := post(hdr, ingestapi.ContentTypeNDJSON); r.status != http.StatusOK || r.ans.Published != 1 {
					t.Errorf("POST with %v: %d %s, want 200", hdr, r.status, r.body)
				}
			}
		})
	}
}
