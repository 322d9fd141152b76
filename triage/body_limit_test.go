package triage_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/triage"
)

// TestBodyLimits checks that request bodies are capped before anything
// reads them: a body over its route's limit is refused with 413 whether
// or not it says its length, and a multipart body is refused with 415
// before the server reads it.
func TestBodyLimits(t *testing.T) {
	t.Parallel()
	b, c := newAliceBundle(t)
	tok := newToken(t, b, "robot")
	id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	check := fmt.Sprintf("/items/%d/check", id)

	// editorForm is the editor's raw view posting a record of about n bytes.
	editorForm := func(n int) string {
		rec := `{"intent":"` + strings.Repeat("x", n) + `"}`
		return url.Values{"csrf_token": {c.csrf}, "mode": {"raw"}, "record": {rec}}.Encode()
	}
	post := func(path, ctype string, body io.Reader, hdr map[string]string) response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+path, body)
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Origin", b.ts.URL)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return c.do(req)
	}
	unsized := func(s string) io.Reader { return io.MultiReader(strings.NewReader(s)) } // sent chunked
	const form = "application/x-www-form-urlencoded"
	fiveMiB := 5 << 20

	t.Run("EditorOverTheLimit", func(t *testing.T) {
		if r := post(check, form, strings.NewReader(editorForm(fiveMiB)), nil); r.status != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s, 5 MiB with Content-Length: %d, want 413", check, r.status)
		}
		if r := post(check, form, unsized(editorForm(fiveMiB)), nil); r.status != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s, 5 MiB chunked: %d, want 413", check, r.status)
		}
		// The page script posts with the token in a header.
		if r := post(check, form, unsized(editorForm(fiveMiB)), map[string]string{"X-CSRF-Token": c.csrf, "Accept": "application/json"}); r.status != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s, 5 MiB chunked, token in the header: %d, want 413", check, r.status)
		}
		body := `{"record":{"intent":"` + strings.Repeat("x", fiveMiB) + `"}}`
		for _, rd := range []io.Reader{strings.NewReader(body), unsized(body)} {
			req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/v1/items/%d/validate", b.ts.URL, id), rd)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			r := b.client(t).do(req)
			if e := apiErr(t, r); r.status != http.StatusRequestEntityTooLarge || e.Code != "too_large" ||
				!strings.Contains(e.Message, fmt.Sprintf("at most %d bytes", triage.MaxRecordBody)) {
				t.Errorf("API validate, 5 MiB: %d %s, want 413 too_large naming the limit", r.status, r.body)
			}
		}
	})

	t.Run("EditorWithinTheLimit", func(t *testing.T) {
		if r := post(check, form, strings.NewReader(editorForm(1<<20)), nil); r.status != http.StatusOK {
			t.Errorf("POST %s, 1 MiB: %d, want 200", check, r.status)
		}
	})

	t.Run("OtherRoutesTakeLess", func(t *testing.T) {
		reject := fmt.Sprintf("/items/%d/reject", id)
		big := url.Values{"csrf_token": {c.csrf}, "reason": {strings.Repeat("r", triage.MaxBody)}}.Encode()
		if r := post(reject, form, strings.NewReader(big), nil); r.status != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s over %d bytes: %d, want 413", reject, triage.MaxBody, r.status)
		}
		login := url.Values{"login": {"alice"}, "password": {strings.Repeat("p", triage.MaxLoginBody)}}.Encode()
		if r := post("/login", form, strings.NewReader(login), nil); r.status != http.StatusRequestEntityTooLarge {
			t.Errorf("POST /login over %d bytes: %d, want 413", triage.MaxLoginBody, r.status)
		}
	})

	t.Run("MultipartRefusedUnread", func(t *testing.T) {
		// A 300 MiB multipart upload to the login, of which only the first
		// 64 KiB are sent: the server must answer without waiting for the
		// rest (it used to spool it to a file before the CSRF check).
		for _, path := range []string{"/login", check, "/api/v1/items/claim-next"} {
			conn, err := tls.Dial("tcp", b.ts.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			part := "--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n\r\n" + strings.Repeat("A", 64<<10)
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nOrigin: %s\r\nAuthorization: Bearer %s\r\n"+
				"Content-Type: multipart/form-data; boundary=xyz\r\nContent-Length: %d\r\n\r\n",
				path, b.ts.Listener.Addr(), b.ts.URL, tok, 300<<20)
			if path == "/login" {
				head = strings.Replace(head, "Authorization: Bearer "+tok+"\r\n", "", 1)
			}
			if _, err := io.WriteString(conn, head+part); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Errorf("POST %s multipart, 300 MiB announced, 64 KiB sent: no answer before the body was sent (%v)", path, err)
				continue
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(msg), "takes no multipart/form-data body") {
				t.Errorf("POST %s multipart: %d %s, want 415", path, resp.StatusCode, msg)
			}
		}
	})
}
