package triage

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/extractq/extractq/store"
)

// The QA queue's JSON API (docs/triage.md, "The QA queue"), for tools:
// claim the next sample, read one, and store its review.

// qaSampleJSON is a sample as the API gives it: the store's detail and
// the fields it is reviewed on, as JSON Pointers.
type qaSampleJSON struct {
	store.QASampleDetail
	Fields []string `json:"fields"`
}

func (s *Server) qaSampleJSON(r *http.Request, id int64) (*qaSampleJSON, error) {
	v, err := s.qaViewOf(r, id)
	if err != nil {
		return nil, err
	}
	out := &qaSampleJSON{QASampleDetail: v.S, Fields: make([]string, 0, len(v.Fields))}
	if out.Verdicts == nil {
		out.Verdicts = []store.QAVerdict{}
	}
	for _, f := range v.Fields {
		out.Fields = append(out.Fields, f.Path)
	}
	return out, nil
}

// apiQAClaimNext answers POST /api/v1/qa/claim-next[?schema=ID] with the
// sample claimed (as GET /api/v1/qa/{id}); 404 when none is open.
func (s *Server) apiQAClaimNext(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	schema := r.URL.Query().Get("schema")
	if schema != "" && !contains(s.schemaIDs(), schema) {
		return invalidf("schema %q is not configured", schema)
	}
	id, err := s.st.QASampleClaimNext(ctx, s.st.Pool, store.QASampleClaimNextParams{Reviewer: reviewerFrom(ctx).Login, SchemaID: schema, Lease: s.cfg.Lease})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: no open QA sample left", ErrNotFound)
	}
	if err != nil {
		return err
	}
	out, err := s.qaSampleJSON(r, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// apiQASample answers GET /api/v1/qa/{id}: the sample, its message text,
// the record, the fields it is reviewed on, and any verdicts.
func (s *Server) apiQASample(w http.ResponseWriter, r *http.Request) error {
	id, err := qaID(r)
	if err != nil {
		return err
	}
	out, err := s.qaSampleJSON(r, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// apiQAReview answers POST /api/v1/qa/{id}/review, body {"verdicts":
// [{"path": "/order_id", "correct": false, "fixed": "48213"}, ...]}: one
// verdict per field of the sample's "fields", each once (fixed: the right
// value as JSON, when correct is false; null or absent for null). It
// answers {"id", "status": "reviewed"}; 409 when the sample is not open
// or another reviewer holds it.
func (s *Server) apiQAReview(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := qaID(r)
	if err != nil {
		return err
	}
	var body struct {
		Verdicts []store.QAVerdict `json:"verdicts"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	v, err := s.qaViewOf(r, id)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	names := map[string]string{}
	for _, f := range v.Fields {
		known[f.Path], names[f.Path] = true, f.Name
	}
	seen := map[string]bool{}
	for i, vd := range body.Verdicts {
		switch {
		case !known[vd.Path]:
			return invalidf("verdicts[%d]: path %s is not a field of the sample (see its \"fields\")", i, quoteValue(vd.Path))
		case seen[vd.Path]:
			return invalidf("verdicts[%d]: path %s is given twice", i, quoteValue(vd.Path))
		case vd.Correct && len(vd.Fixed) > 0 && string(vd.Fixed) != "null":
			return invalidf("verdicts[%d] (%s): a fix for a field marked correct", i, vd.Path)
		}
		if !vd.Correct {
			fix := vd.Fixed
			if len(fix) == 0 {
				fix = json.RawMessage(`null`)
			}
			if err := s.qaFixError(v.S.SchemaID, v.S.Record, names[vd.Path], fix); err != nil {
				return invalidf("verdicts[%d] (%s): %v", i, vd.Path, err)
			}
		}
		seen[vd.Path] = true
	}
	if len(seen) != len(known) {
		var missing []string
		for _, f := range v.Fields {
			if !seen[f.Path] {
				missing = append(missing, f.Path)
			}
		}
		return invalidf("verdicts: every field needs one; missing %s", quoteList(missing))
	}
	for i := range body.Verdicts {
		if body.Verdicts[i].Correct {
			body.Verdicts[i].Fixed = nil
		}
	}
	if err := s.st.QASampleReview(ctx, s.st.Pool, store.QASampleReviewParams{ID: id, Reviewer: reviewerFrom(ctx).Login, Via: store.ViaAPI, Verdicts: body.Verdicts}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "status": store.QAReviewed})
	return nil
}

func quoteList(xs []string) string {
	b, _ := json.Marshal(xs)
	return string(b)
}
