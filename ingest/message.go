package ingest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Message is one message given by its fields rather than as a line: what
// ingestapi maps a webhook's body to. Its fields pass the checks a JSONL
// line's do (CheckMessage).
type Message struct {
	ID     string
	Source string
	Text   string
	// Metadata is kept as the message's metadata; nil is {}. Its keys are
	// its own: "id" or "text" here is metadata, not the message's id.
	// Numbers should be json.Number, so they are kept as sent.
	Metadata map[string]any
}

// CheckMessage checks m as ParseLine checks a line's fields, with the
// same reasons: an id and a source of valid UTF-8 (never rewritten), an
// id without control, format or surrounding white-space characters, a
// text with a visible character, at most maxText bytes, no NUL, and
// metadata without a NUL or a number Postgres jsonb cannot hold. Each run
// of invalid UTF-8 in the text is replaced, as on a line, by one U+FFFD
// (FlagInvalidUTF8); in the metadata, encoding/json replaces it. The
// error names the field.
func CheckMessage(m Message, maxText int) (Input, error) {
	var in Input
	for _, f := range []struct{ name, v string }{{"id", m.ID}, {"source", m.Source}} {
		if !utf8.ValidString(f.v) {
			return in, fmt.Errorf("%q is not valid UTF-8: ids and sources are kept byte for byte, so it is refused, never changed", f.name)
		}
	}
	if err := in.setID(m.ID); err != nil {
		return in, err
	}
	if err := in.setSource(m.Source); err != nil {
		return in, err
	}
	text := m.Text
	if !utf8.ValidString(text) {
		// Each run of invalid bytes becomes one U+FFFD, as on a line.
		text = strings.ToValidUTF8(text, "\uFFFD")
		in.Flags = append(in.Flags, FlagInvalidUTF8)
	}
	if err := in.setText(text, maxText); err != nil {
		return in, err
	}
	meta := m.Metadata
	if meta == nil {
		meta = map[string]any{}
	}
	return in, in.setMetadata(meta)
}

// RunMessages ingests msgs as one batch, exactly as Run ingests a file
// whose n-th line (from 1) is msgs[n-1]: each checked by CheckMessage and
// rejected with its reason, or recorded and published, or counted as a
// duplicate. Its Summary and errors are Run's; no message at all is a
// *StartError wrapping an *EmptyInputError.
func (in *Ingester) RunMessages(ctx context.Context, msgs []Message) (sum Summary, err error) {
	sum.rej = &rejections{max: in.cfg.MaxErrors, onReject: in.cfg.OnReject}
	defer func() {
		sum.Errors, sum.ErrorsOmitted = sum.rej.kept, sum.rej.omitted
		sort.SliceStable(sum.Errors, func(i, j int) bool { return sum.Errors[i].Line < sum.Errors[j].Line })
		sum.rej = nil
	}()
	return in.run(ctx, messagesInput(msgs), sum)
}

// messagesInput is the input of RunMessages: message n is line n+1.
type messagesInput []Message

func (ms messagesInput) read(ctx context.Context, sum *Summary, handle handleFunc) error {
	for i, m := range ms {
		if ctx.Err() != nil {
			return nil // the cause is reported by run
		}
		sum.Lines++
		if !handle(i+1, func(maxText int) (Input, error) { return CheckMessage(m, maxText) }) {
			return nil
		}
	}
	return nil
}

func (ms messagesInput) empty() string { return "no messages were given" }

var _ input = messagesInput(nil)
