package ingestapi_test

import (
	"net/http"
	"testing"
)

// TestServeCharsets: a body labelled UTF-8 or US-ASCII (a subset of
// UTF-8, RFC 20) is read, in any case of the name; any other charset is
// 415 naming it.
func TestServeCharsets(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	for i, cs := range []string{"utf-8", "UTF-8", `"utf-8"`, "us-ascii", "US-ASCII"} {
		body := `{"id": "cs-` + string(rune('a'+i)) + `", "text": "Where is order 48213?"}` + "\n"
		if r := se.post(t, "", "application/x-ndjson; charset="+cs, body); r.status != http.StatusOK || r.ans.Published != 1 {
			t.Errorf("charset=%s: %d %s, want 200 with the line published", cs, r.status, r.body)
		}
	}
	for _, cs := range []string{"latin1", "iso-8859-1", "utf-16", "ascii7"} {
		r := se.post(t, "", "application/x-ndjson; charset="+cs, `{"id": "x", "text": "y"}`+"\n")
		wantError(t, "charset="+cs, r, http.StatusUnsupportedMediaType, "unsupported_media_type", `charset "`+cs+`": only UTF-8 is read`)
	}
}
