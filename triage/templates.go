package triage

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/store"
)

// Pages are html/template files embedded from templates/: each page file
// is parsed with base.tmpl (the layout) and the partials, as pkgsite
// parses its pages. html/template escapes everything the customer wrote;
// no page holds inline script or style (the CSP forbids both).

//go:embed templates
var templateFS embed.FS

var pageNames = []string{"queue", "item", "login", "rerun", "audit", "reports", "error", "qa", "qaitem"}

var templateFuncs = template.FuncMap{
	"ago":     ago,
	"plural":  plural,
	"ts":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"tsp":     func(t *time.Time) string { return tsp(t) },
	"segs":    func(s string) []Segment { return Segments(s, nil) },
	"visible": Visible,
	"usd":     func(f float64) string { return fmt.Sprintf("$%.6f", f) },
	"pretty":  prettyJSON,
	"raw":     func(b json.RawMessage) string { return prettyRaw(b) },
	"paths":   errorPaths,
	"kinds":   errorKinds,
	"join":    strings.Join,
	"deref":   func(p *int) int { return derefInt(p) },
	"add":     func(a, b int) int { return a + b },
	"dict":    dict,
	"take": func(list []string, n int) []string {
		if len(list) > n {
			return list[:n]
		}
		return list
	},
	"hasPrefix": func(s, p string) bool {
		return strings.HasPrefix(s, p)
	},
}

func tsp(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// dict builds a map for passing several values to a partial.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, errors.New("dict: odd number of arguments")
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, errors.New("dict: key is not a string")
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// ago says how long ago t was, coarsely.
func ago(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

// errorPaths returns the distinct paths of errs ("/" for the root).
func errorPaths(errs extracttype.ErrorList) []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range errs {
		p := e.Path
		if p == "" {
			p = "/"
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// errorKinds returns the distinct kinds of errs.
func errorKinds(errs extracttype.ErrorList) []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range errs {
		if !seen[string(e.Kind)] {
			seen[string(e.Kind)] = true
			out = append(out, string(e.Kind))
		}
	}
	sort.Strings(out)
	return out
}

// plural returns "1 error", "2 errors": n and noun, with an s unless n
// is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// parsedPages parses the page templates once per process: they depend on
// nothing of a Server, and html/template executes (and escapes, on first
// use) a template safely from many goroutines. A test binary starts a
// Server a test, each of which parsed and escaped the same trees again.
// The map is read-only.
var parsedPages = sync.OnceValues(parsePages)

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("base.tmpl").Funcs(templateFuncs).ParseFS(templateFS,
			"templates/base.tmpl", "templates/partials/*.tmpl", "templates/"+name+".tmpl")
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// pageData is what the layout needs, with the page's own Body.
type pageData struct {
	Title    string
	Page     string
	Reviewer *store.Reviewer
	Role     store.Role // the request's (roleFrom); Can asks what it may do
	CSRF     string
	Flash    string
	FlashErr bool
	Local    bool
	Body     any
}

// render executes page into a buffer, then writes it with status.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, page, title string, body any) error {
	ctx := r.Context()
	d := pageData{
		Title: title, Page: page, Reviewer: reviewerFrom(ctx), Role: roleFrom(ctx), CSRF: s.csrfToken(ctx), Local: s.localOnly(), Body: body,
		Flash: s.sessions.PopString(ctx, sessFlash), FlashErr: s.sessions.PopBool(ctx, sessFlashErr),
	}
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, "base", d); err != nil {
		return fmt.Errorf("render %s: %w", page, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
	return nil
}

// renderPartial executes one named template of page (no layout).
func (s *Server) renderPartial(w http.ResponseWriter, page, name string, data any) error {
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		return fmt.Errorf("render %s/%s: %w", page, name, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(w)
	return nil
}

type errorData struct {
	Status  int
	Text    string
	Message string
	Login   bool
}

// pageError maps err to a status and shows the error page. Server errors
// are logged with their detail and shown without it.
func (s *Server) pageError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	s.logError(r, status, err)
	if status == 499 {
		return
	}
	d := errorData{Status: status, Text: http.StatusText(status), Message: publicMessage(err, status),
		Login: status == http.StatusUnauthorized}
	if rerr := s.render(w, r, status, "error", http.StatusText(status), d); rerr != nil {
		s.log.Error("rendering the error page", zap.Error(rerr))
		http.Error(w, http.StatusText(status), status)
	}
}

// apiError maps err to a status and a JSON body (httperr.Write):
//
//	{"error": {"code": "conflict", "message": "...", "errors": [...]}}
//
// errors is the validation error list of a 422 (apiErrorOf).
func (s *Server) apiError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	s.logError(r, status, err)
	if status == 499 {
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	httperr.Write(w, apiErrorOf(err, status))
}

func (s *Server) logError(r *http.Request, status int, err error) {
	fields := []zap.Field{zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Int("status", status), zap.Error(err)}
	if status >= 500 && status != 499 {
		s.log.Error("request failed", fields...)
	} else {
		s.log.Debug("request refused", fields...)
	}
}

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := compactJSON(v)
	if err != nil {
		httperr.Write(w, &httperr.Error{Code: httperr.Internal, Message: "cannot encode the answer", Err: err})
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
