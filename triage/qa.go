package triage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/extractq/extractq/store"
)

// The QA queue (docs/triage.md, "The QA queue"): validated results the
// worker drew for QA (config schemas[].qa). A reviewer claims the next
// sample, marks each field of its record right or wrong (fixing a wrong
// one), and the verdicts make the false-accept estimates of the reports
// page (qa_field_estimates). A sample is not a triage item: its run is a
// result already, and the review changes no result.

// qaField is one field of a sample's record as the review form shows it.
type qaField struct {
	Path  string // the field's JSON Pointer
	Name  string
	Value string // the record's value, as indented JSON
	// Text says the fix is taken as text (a string field); else as JSON.
	Text bool
	// Verdict is "right", "wrong" or "" (not marked yet); Fix the fix
	// typed, when the form comes back.
	Verdict, Fix string
}

// qaQueueView is the QA queue page.
type qaQueueView struct {
	Counts  store.QACounts
	Samples []store.QASample
}

// qaItemView is a sample's review page.
type qaItemView struct {
	S      store.QASampleDetail
	Fields []qaField
	// Mine: the sample is open and claimed by the viewer (or by nobody).
	Open, Mine bool
	Problem    string // why the form came back
}

// qaPage is GET /qa: the open samples, oldest first.
func (s *Server) qaPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	counts, err := s.st.QASampleCounts(ctx, s.st.Pool, "")
	if err != nil {
		return err
	}
	open, err := s.st.QASampleList(ctx, s.st.Pool, store.QASampleListParams{Status: store.QAOpen, Limit: queuePageSize})
	if err != nil {
		return err
	}
	return s.render(w, r, http.StatusOK, "qa", "QA queue", &qaQueueView{Counts: counts, Samples: open})
}

// qaClaimNextPage is POST /qa/claim-next: claims the next open sample and
// shows it, or goes back to the queue when none is left.
func (s *Server) qaClaimNextPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := s.st.QASampleClaimNext(ctx, s.st.Pool, store.QASampleClaimNextParams{Reviewer: reviewerFrom(ctx).Login, Lease: s.cfg.Lease})
	if errors.Is(err, store.ErrNotFound) {
		s.setFlash(ctx, "No open QA sample is left.", false)
		http.Redirect(w, r, "/qa", http.StatusSeeOther)
		return nil
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, fmt.Sprintf("/qa/%d", id), http.StatusSeeOther)
	return nil
}

func qaID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, invalidf("QA sample id %q is not a positive number", r.PathValue("id"))
	}
	return id, nil
}

// qaViewOf builds sample id's review page.
func (s *Server) qaViewOf(r *http.Request, id int64) (*qaItemView, error) {
	ctx := r.Context()
	d, err := s.st.QASampleGet(ctx, s.st.Pool, id)
	if err != nil {
		return nil, err
	}
	v := &qaItemView{S: d, Open: d.Status == store.QAOpen}
	me := reviewerFrom(ctx).Login
	v.Mine = v.Open && (d.ClaimedBy == nil || *d.ClaimedBy == me)
	var record map[string]json.RawMessage
	if len(d.Record) > 0 {
		if err := json.Unmarshal(d.Record, &record); err != nil {
			return nil, fmt.Errorf("QA sample %d: the record is not an object: %w", id, err)
		}
	}
	verdicts := map[string]store.QAVerdict{}
	for _, vd := range d.Verdicts {
		verdicts[vd.Path] = vd
	}
	names := s.qaFieldNames(d.SchemaID, record)
	for _, name := range names {
		f := qaField{Path: "/" + escapePointer(name), Name: name, Value: prettyRaw(record[name]), Text: s.qaTextField(d.SchemaID, name)}
		if f.Value == "" {
			f.Value = "(absent)"
		}
		if vd, ok := verdicts[f.Path]; ok {
			f.Verdict = map[bool]string{true: "right", false: "wrong"}[vd.Correct]
			f.Fix = string(vd.Fixed)
		}
		v.Fields = append(v.Fields, f)
	}
	return v, nil
}

// qaFieldNames returns the fields a sample of schemaID is reviewed on:
// the schema's top-level properties in the form's order, else the
// record's keys.
func (s *Server) qaFieldNames(schemaID string, record map[string]json.RawMessage) []string {
	if doc := s.docs[schemaID]; doc != nil {
		return propertyOrder(doc)
	}
	names := make([]string, 0, len(record))
	for k := range record {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// qaTextField reports whether field name of schemaID takes a fix as
// text: a string (or enum of strings) field, nullable or not.
func (s *Server) qaTextField(schemaID, name string) bool {
	doc := s.docs[schemaID]
	if doc == nil {
		return false
	}
	props, _ := doc["properties"].(map[string]any)
	n, _ := props[name].(map[string]any)
	if n == nil {
		return false
	}
	n = resolve(doc, n)
	switch kindOf(n) {
	case "text":
		return true
	case "enum":
		for _, e := range n["enum"].([]any) {
			if _, ok := e.(string); !ok && e != nil {
				return false
			}
		}
		return true
	}
	return false
}

// qaItemPage is GET /qa/{id}.
func (s *Server) qaItemPage(w http.ResponseWriter, r *http.Request) error {
	id, err := qaID(r)
	if err != nil {
		return err
	}
	v, err := s.qaViewOf(r, id)
	if err != nil {
		return err
	}
	return s.render(w, r, http.StatusOK, "qaitem", fmt.Sprintf("QA sample %d", id), v)
}

// qaReviewPage is POST /qa/{id}: the form's verdict per field ("v:PATH"
// right or wrong) and fix ("fix:PATH": text for a string field, empty
// for null; JSON otherwise). Every field must be marked. On success it
// claims the next sample and shows it.
func (s *Server) qaReviewPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := qaID(r)
	if err != nil {
		return err
	}
	if err := r.ParseForm(); err != nil {
		return bodyError(r, "form", err)
	}
	v, err := s.qaViewOf(r, id)
	if err != nil {
		return err
	}
	var verdicts []store.QAVerdict
	var problems []string
	for i := range v.Fields {
		f := &v.Fields[i]
		marks, fixes := r.PostForm["v:"+f.Path], r.PostForm["fix:"+f.Path]
		if len(marks) > 1 || len(fixes) > 1 {
			problems = append(problems, f.Name+": given twice (mark each field once)")
			continue
		}
		f.Verdict, f.Fix = r.PostForm.Get("v:"+f.Path), r.PostForm.Get("fix:"+f.Path)
		switch f.Verdict {
		case "right":
			verdicts = append(verdicts, store.QAVerdict{Path: f.Path, Correct: true})
		case "wrong":
			fix, err := qaFixJSON(f.Fix, f.Text)
			if err == nil {
				err = s.qaFixError(v.S.SchemaID, v.S.Record, f.Name, fix)
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", f.Name, err))
				continue
			}
			verdicts = append(verdicts, store.QAVerdict{Path: f.Path, Correct: false, Fixed: fix})
		case "":
			problems = append(problems, f.Name+": not marked")
		default:
			problems = append(problems, fmt.Sprintf("%s: mark %s is neither right nor wrong", f.Name, quoteValue(f.Verdict)))
		}
	}
	if len(problems) == 0 {
		err = s.st.QASampleReview(ctx, s.st.Pool, store.QASampleReviewParams{ID: id, Reviewer: reviewerFrom(ctx).Login, Via: store.ViaUI, Verdicts: verdicts})
		if err == nil {
			wrong := len(v.Fields) - countRight(verdicts)
			s.setFlash(ctx, fmt.Sprintf("QA sample %d reviewed: %s wrong.", id, plural(wrong, "field")), false)
			return s.qaClaimNextPage(w, r)
		}
		if statusOf(err) != http.StatusConflict {
			return err
		}
		problems = append(problems, publicMessage(err, http.StatusConflict))
	}
	v.Problem = "Not saved: " + strings.Join(problems, "; ")
	return s.render(w, r, http.StatusUnprocessableEntity, "qaitem", fmt.Sprintf("QA sample %d", id), v)
}

func countRight(vs []store.QAVerdict) int {
	n := 0
	for _, v := range vs {
		if v.Correct {
			n++
		}
	}
	return n
}

// qaFixJSON returns the fix typed as JSON: for a text field the text
// itself (empty for null), else the text parsed as JSON (empty for null).
func qaFixJSON(fix string, text bool) (json.RawMessage, error) {
	fix = strings.TrimSpace(fix)
	if fix == "" || fix == "null" {
		return json.RawMessage(`null`), nil
	}
	if text {
		b, err := json.Marshal(fix)
		return b, err
	}
	if !json.Valid([]byte(fix)) {
		return nil, errors.New("the fix is not JSON (a number, true, false, a list [..], or null)")
	}
	return json.RawMessage(fix), nil
}

// qaFixError checks fix (JSON), a reviewer's value for top-level field
// name of a sample of schemaID whose record is record, against the
// field's subschema in the schema in use (pipeline.Schema.ValidateField):
// an error naming what the schema wants (its messages carry no record
// values); nil when the fix fits or the schema is not served. A fix
// becomes an eval -qa label, so one the schema refuses is not stored.
func (s *Server) qaFixError(schemaID string, record json.RawMessage, name string, fix json.RawMessage) error {
	e, ok := s.cfg.Schemas[schemaID]
	if !ok || e.Schema == nil {
		return nil
	}
	var rec map[string]any
	if len(record) > 0 {
		dec := json.NewDecoder(bytes.NewReader(record))
		dec.UseNumber()
		_ = dec.Decode(&rec) // a record not an object checks the fix alone
	}
	var val any
	dec := json.NewDecoder(bytes.NewReader(fix))
	dec.UseNumber()
	if err := dec.Decode(&val); err != nil {
		return errors.New("the fix is not JSON")
	}
	errs := e.Schema.ValidateField(rec, name, val)
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, fe := range errs {
		msgs[i] = fe.Error()
	}
	return fmt.Errorf("the fix does not fit the field's schema: %s", strings.Join(msgs, "; "))
}

// escapePointer escapes a JSON Pointer reference token (RFC 6901: ~ is
// ~0, / is ~1).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
