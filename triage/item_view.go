package triage

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
)

// itemView is what the item page shows.
type itemView struct {
	It     *itemState
	D      store.TriageItemDetail
	Filter Filter
	// Prev and Next are the neighbouring items in the filtered queue.
	Prev, Next int64
	// Open: the item awaits a decision. Mine: the reviewer holds its
	// lease. ClaimedByOther: someone else does. Editable: open and mine.
	Open, Mine, ClaimedByOther, Editable bool
	// CanReopen: the reviewer approved or rejected the item less than
	// Config.UndoWindow ago, until UndoUntil, and may undo it.
	CanReopen    bool
	UndoUntil    time.Time
	LeaseSeconds int
	// Live: the page hears other replicas' decisions on the item
	// (live.go).
	Live bool

	Segments         []Segment
	MsgControls, RTL bool
	Chars            int
	Form             *Field
	Unplaced         extracttype.ErrorList // errors no field shows
	Errors           extracttype.ErrorList // the draft's errors now
	Raw              string                // the draft as JSON
	Valid            bool
	Overridable      bool
	Message          string // what the last action said
	MessageErr       bool
	OverrideReason   string
	// Digest is recordDigest of the record the page validated (Errors):
	// Approve sends it, and a record of another digest is not approved.
	Digest            string
	SchemaVersion     string // the version the editor validates with
	RunSchemaVersions []string

	Calls          []store.LLMCallRecord
	TotalTokens    int
	TotalCost      float64
	TotalLatencyMS int
	FirstPretty    string
	RepairPretty   string
	PatchPretty    string
	Diff           []DiffLine
	DiffTitle      string
	// RepairUnchanged: the repair's record is the first reply's, value
	// for value: the repair call was paid for nothing.
	RepairUnchanged bool

	// Meta is the message's metadata, key by key (values as JSON text,
	// strings as they are), and its source, id and flags.
	Meta []MetaItem

	Audit         []store.AuditEntry
	CurrentPretty string
}

// viewOpts are what an action carries into the page it shows.
type viewOpts struct {
	record     any                   // nil: the draft
	parseErrs  extracttype.ErrorList // from reading the form or JSON
	message    string
	messageErr bool
	reason     string
}

// itemViewOf builds the item page for reviewer rv.
func (s *Server) itemViewOf(ctx context.Context, it *itemState, f Filter, o viewOpts) (*itemView, error) {
	rv := reviewerFrom(ctx)
	d := it.D
	v := &itemView{It: it, D: d, Filter: f, Message: o.message, MessageErr: o.messageErr, OverrideReason: o.reason,
		LeaseSeconds: int(s.cfg.Lease / time.Second)}
	v.Open = d.Item.Status == store.TriageOpen
	v.Mine = v.Open && d.Item.ClaimedBy == rv.Login
	v.ClaimedByOther = v.Open && d.Item.ClaimedBy != "" && !v.Mine
	v.Editable = v.Mine && it.Entry != nil
	if at := d.Item.DecidedAt; at != nil && d.Item.DecidedBy == rv.Login &&
		(d.Item.Status == store.TriageApproved || d.Item.Status == store.TriageRejected) && time.Since(*at) < s.cfg.UndoWindow {
		v.CanReopen, v.UndoUntil = true, at.Add(s.cfg.UndoWindow)
	}

	var err error
	v.Prev, v.Next, err = s.st.TriageQueueNeighbors(ctx, s.st.Pool, f.Store(rv.Login, time.Now()), d.Item.ID)
	if err != nil {
		return nil, err
	}

	record := o.record
	if record == nil {
		record = it.Draft
		if it.Doc != nil && v.Open {
			// The draft as the form posts it, which is what the page
			// validates and Approve sends (a value the form cannot show
			// as it is comes back the way the form reads it).
			if rt, perrs := parseForm(it.Doc, formValues(s.draftForm(it, record))); len(perrs) == 0 {
				record = rt
			}
		}
	}
	v.Digest = recordDigest(record)
	v.Raw = prettyJSON(record)
	if it.Entry != nil {
		v.SchemaVersion = it.Entry.Schema.Version
	}
	seen := map[string]bool{}
	for _, c := range d.Calls {
		if !seen[c.SchemaVersion] {
			seen[c.SchemaVersion] = true
			v.RunSchemaVersions = append(v.RunSchemaVersions, c.SchemaVersion)
		}
	}

	// Errors now, and the values found in the message.
	var anchors map[string]string
	if d.Item.Status == store.TriageApproved && d.Current != nil && o.record == nil {
		var ev []extracttype.Evidence
		_ = json.Unmarshal(d.Current.Evidence, &ev)
		v.Segments, anchors = highlight(it, nil, ev)
		v.Valid = true
	} else {
		errs, ev := it.validate(record)
		errs = append(append(extracttype.ErrorList{}, o.parseErrs...), errs...)
		v.Errors, v.Valid, v.Overridable = errs, len(errs) == 0, onlyGrounding(errs)
		v.Segments, anchors = highlight(it, errs, ev)
	}
	v.MsgControls, v.RTL = HasControls(d.Message.Body), HasRTL(d.Message.Body)
	v.Meta = metaItems(d.Message)
	v.Chars = len([]rune(d.Message.Body))
	if it.Doc != nil {
		v.Form, v.Unplaced = BuildForm(it.Doc, record, v.Errors, anchors)
	} else {
		v.Unplaced = v.Errors
	}

	// The calls, the first reply, and the repair as a diff or a patch.
	v.Calls = d.Calls
	for _, c := range d.Calls {
		v.TotalTokens += c.PromptTokens + c.CompletionTokens
		v.TotalCost += c.CostUSD
		v.TotalLatencyMS += c.LatencyMS
		switch c.Attempt {
		case 1:
			v.FirstPretty = replyPretty(c.Reply)
		case 2:
			v.RepairPretty = replyPretty(c.Reply)
			if len(c.Patch) > 0 {
				v.PatchPretty = prettyRaw(c.Patch)
			}
		}
	}
	switch {
	case it.First != nil && it.Patched != nil:
		v.Diff, v.DiffTitle = LineDiff(prettyJSON(it.First), prettyJSON(it.Patched)), "first reply → with the repair patch applied"
	case it.First != nil && it.Repair != nil:
		v.Diff, v.DiffTitle = LineDiff(prettyJSON(it.First), prettyJSON(it.Repair)), "first reply → repair reply"
	}
	if it.First != nil && (it.Repair != nil || it.Patched != nil) {
		after := it.Repair
		if it.Patched != nil {
			after = it.Patched
		}
		v.RepairUnchanged = prettyJSON(it.First) == prettyJSON(after)
	}

	if v.Audit, err = s.st.AuditList(ctx, s.st.Pool, store.AuditListParams{TriageItemID: d.Item.ID, Limit: 50}); err != nil {
		return nil, err
	}
	if d.Current != nil {
		v.CurrentPretty = prettyRaw(d.Current.Data)
	}
	return v, nil
}

// MetaItem is one line of the message's metadata.
type MetaItem struct{ Key, Value string }

// metaItems lists m's source, id, received time, flags and metadata keys
// (sorted), each value as text: a string as it is, anything else as JSON.
func metaItems(m store.Message) []MetaItem {
	out := []MetaItem{{"source", m.Source}, {"id", m.ExternalID}, {"received", m.ReceivedAt.UTC().Format("2006-01-02 15:04:05 UTC")}}
	if len(m.Flags) > 0 {
		out = append(out, MetaItem{"flags", strings.Join(m.Flags, ", ")})
	}
	var md map[string]json.RawMessage
	if err := json.Unmarshal(m.Metadata, &md); err == nil {
		keys := make([]string, 0, len(md))
		for k := range md {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			val := string(md[k])
			var str string
			if json.Unmarshal(md[k], &str) == nil {
				val = str
			}
			out = append(out, MetaItem{k, val})
		}
	}
	return out
}

// draftForm is the editor of record, without errors or highlights.
func (s *Server) draftForm(it *itemState, record any) *Field {
	f, _ := BuildForm(it.Doc, record, nil, nil)
	return f
}

// highlight cuts the item's message into segments with the grounded
// values of ev highlighted, "failing" where the record's field has an
// error (in errs). It returns the segments and the highlight anchor of
// each path.
func highlight(it *itemState, errs extracttype.ErrorList, ev []extracttype.Evidence) ([]Segment, map[string]string) {
	failing := map[string]bool{}
	for _, e := range errs {
		failing[e.Path] = true
	}
	spans := make([]Span, 0, len(ev))
	for _, e := range ev {
		spans = append(spans, Span{Path: e.Path, Start: e.Start, End: e.End, Failing: failing[e.Path]})
	}
	segs := Segments(it.D.Message.Body, spans)
	anchors := map[string]string{}
	for _, seg := range segs {
		for _, p := range seg.Paths {
			if seg.Anchor != "" && anchors[p] == "" {
				anchors[p] = seg.Anchor
			}
		}
	}
	return segs, anchors
}

// replyPretty shows a reply's JSON object indented, or the reply as it is.
func replyPretty(reply string) string {
	if obj := parsedObject(reply); obj != nil && strings.HasPrefix(strings.TrimSpace(reply), "{") {
		return prettyJSON(obj)
	}
	return reply
}
