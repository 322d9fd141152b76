package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Envelope is the body of a run message on the stream, encoded as JSON. It
// is a reference to one run of one message, never the customer's text: the
// text lives in Postgres and the worker reads it from there.
type Envelope struct {
	// MessageID is the message's id in Postgres (messages.id), above 0.
	MessageID int64 `json:"message_id"`
	// RunNo is the run's number, from 1 (runs.run_no).
	RunNo int `json:"run_no"`
	// BatchID is the batch the run belongs to (runs.batch_id).
	BatchID string `json:"batch_id"`
	// SchemaID is the schema the run extracts; the run is published on
	// config.NATS.RunsSubject(SchemaID).
	SchemaID string `json:"schema_id"`
}

// DedupID returns the publish dedup key of the run, "run.<message id>.<run
// no>": one key per (message, run), so a re-run is not dropped as a
// duplicate while a second publish of the same run is.
func (e Envelope) DedupID() string {
	return "run." + strconv.FormatInt(e.MessageID, 10) + "." + strconv.Itoa(e.RunNo)
}

// Validate reports why e cannot name a run: a message id below 1, a run
// number below 1, or an empty schema id. BatchID may be empty.
func (e Envelope) Validate() error {
	switch {
	case e.MessageID < 1:
		return fmt.Errorf("message_id %d is below 1", e.MessageID)
	case e.RunNo < 1:
		return fmt.Errorf("run_no %d is below 1", e.RunNo)
	case e.SchemaID == "":
		return errors.New("schema_id is empty")
	}
	return nil
}

// decodeEnvelope parses a run message body. Unknown fields are allowed, so
// an older worker still reads what a newer publisher sends.
func decodeEnvelope(b []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return Envelope{}, fmt.Errorf("envelope is not JSON: %w", err)
	}
	if err := e.Validate(); err != nil {
		return Envelope{}, fmt.Errorf("envelope: %w", err)
	}
	return e, nil
}
