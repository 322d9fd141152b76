// Package erasure erases customers' text: the messages a customer asked
// to have erased (Service.Erase), and every message older than the
// retention period (Service.Purge). The retention command (cmd/retention)
// and the HTTP API (ingestapi, POST /v1/erasures) both call it, and keep
// only their own reading and printing.
//
// What an erasure removes, and what it keeps, is store's (store.Erasure,
// docs/retention.md): the SQL lives there. This package reads the keys
// (ParseKey, ReadKeys), counts a key given twice once, erases them
// store.MaxErasureKeys at a time, names the sources a key not found is
// stored under, and counts the results by status.
package erasure

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/extractq/extractq/store"
)

// Service erases messages' text in one Postgres database.
type Service struct {
	st *store.Store
}

// New returns a Service erasing in st.
func New(st *store.Store) *Service { return &Service{st: st} }

// Request is an erasure of messages a customer asked to have erased.
type Request struct {
	// Keys are the messages to erase; a key given twice counts once.
	Keys []store.MessageKey
	// Actor (required) and Reason are for the audit log; Via (required) is
	// store.ViaCLI, ViaAPI or ViaUI.
	Actor, Via, Reason string
	// DryRun erases nothing: the result says what an erasure would do,
	// store.ErasureWouldErase for the messages it would erase.
	DryRun bool
	// MaxKeys, when above 0, refuses more distinct keys (a
	// *TooManyKeysError) before anything is erased. With 0 any number is
	// erased, store.MaxErasureKeys (one transaction) at a time.
	MaxKeys int
	// Hints is how many of the keys not found are looked up by id alone,
	// to name the sources their id is stored under (KeyResult.StoredUnder):
	// each lookup reads the whole table. 0 looks none up.
	Hints int
}

// KeyResult is what the erasure did to one key.
type KeyResult struct {
	store.ErasureResult
	// StoredUnder are the sources that hold the key's id, for a key not
	// found (and looked up: Request.Hints); "" is no source.
	StoredUnder []string `json:"stored_under,omitempty"`
}

// Result is what an erasure did: one result per distinct key, in the
// order first given, and the counts by status.
type Result struct {
	DryRun        bool        `json:"dry_run"`
	WouldErase    int         `json:"would_erase"` // a dry run's: erased, were it not a dry run
	Erased        int         `json:"erased"`
	AlreadyErased int         `json:"already_erased"`
	NotFound      int         `json:"not_found"`
	Queued        int         `json:"queued"` // not erased: a run is being extracted; ask again once it is done
	Results       []KeyResult `json:"results"`
	// Given counts the keys of the request, repeats included.
	Given int `json:"-"`
}

// Missed counts the keys not erased that an erasure again may erase: not
// found, or queued.
func (r Result) Missed() int { return r.NotFound + r.Queued }

// add counts and keeps one key's result.
func (r *Result) add(k KeyResult) {
	switch k.Status {
	case store.ErasureWouldErase:
		r.WouldErase++
	case store.ErasureErased:
		r.Erased++
	case store.ErasureAlreadyErased:
		r.AlreadyErased++
	case store.ErasureNotFound:
		r.NotFound++
	case store.ErasureQueued:
		r.Queued++
	}
	r.Results = append(r.Results, k)
}

// TooManyKeysError is a request of more distinct keys than its MaxKeys.
type TooManyKeysError struct {
	Keys, Max int
}

func (e *TooManyKeysError) Error() string {
	return fmt.Sprintf("%d distinct messages; at most %d in one request", e.Keys, e.Max)
}

// InvalidKeyError is a key whose source or id is not valid UTF-8. Ids and
// sources are stored byte for byte and only as UTF-8 (ingest refuses
// others), so such a key names no stored message; and passed on, its
// bytes would be read as U+FFFD and match another message's id (the
// stored "caf\uFFFD" for "caf\xe9"). Nothing is erased.
type InvalidKeyError struct {
	Key   store.MessageKey
	Field string // "source" or "id"
}

func (e *InvalidKeyError) Error() string {
	v := e.Key.ExternalID
	if e.Field == "source" {
		v = e.Key.Source
	}
	return fmt.Sprintf("%s %q is not valid UTF-8: ids and sources are kept byte for byte, so it names no stored message; nothing was erased", e.Field, v)
}

// CheckKeys returns an *InvalidKeyError for the first key that is not
// valid UTF-8, else nil. Erase checks its keys so; a command may check
// them before connecting.
func CheckKeys(keys []store.MessageKey) error {
	for _, k := range keys {
		if !utf8.ValidString(k.Source) {
			return &InvalidKeyError{Key: k, Field: "source"}
		}
		if !utf8.ValidString(k.ExternalID) {
			return &InvalidKeyError{Key: k, Field: "id"}
		}
	}
	return nil
}

// StoppedError is Postgres failing part way: the chunks before it are
// erased (Done distinct keys) and in the Result; erasing the same keys
// again is safe.
type StoppedError struct {
	Done int
	Err  error
}

func (e *StoppedError) Error() string { return e.Err.Error() }
func (e *StoppedError) Unwrap() error { return e.Err }

// ErrNoKeys is a request naming no message.
var ErrNoKeys = errors.New("erasure: no message to erase")

// Distinct returns keys without repeats, in the order first given.
func Distinct(keys []store.MessageKey) []store.MessageKey {
	seen := make(map[store.MessageKey]bool, len(keys))
	out := keys[:0:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// Erase erases the text of the messages req names (store.MessagesErase,
// one transaction per store.MaxErasureKeys keys), as store.Erasure
// describes, and returns a result per distinct key. A message with a
// queued run, erased already, or missing is left as it is and says so.
// It returns an error for a request without Actor or Via, ErrNoKeys for
// no key, a *TooManyKeysError over req.MaxKeys and an *InvalidKeyError
// for a key that is not UTF-8 (nothing erased then), and
// a *StoppedError when Postgres fails: the Result then holds the chunks
// erased before.
func (s *Service) Erase(ctx context.Context, req Request) (Result, error) {
	res := Result{DryRun: req.DryRun, Given: len(req.Keys)}
	keys := Distinct(req.Keys)
	switch {
	case req.Actor == "" || req.Via == "":
		return res, errors.New("erasure.Erase: Actor and Via are required")
	case len(keys) == 0:
		return res, ErrNoKeys
	case req.MaxKeys > 0 && len(keys) > req.MaxKeys:
		return res, &TooManyKeysError{Keys: len(keys), Max: req.MaxKeys}
	}
	if err := CheckKeys(keys); err != nil {
		return res, err
	}
	p := store.ErasureParams{Actor: req.Actor, Via: req.Via, Reason: req.Reason, DryRun: req.DryRun}
	hints := 0
	for start := 0; start < len(keys); start += store.MaxErasureKeys {
		chunk := keys[start:min(start+store.MaxErasureKeys, len(keys))]
		out, err := s.st.MessagesErase(ctx, s.st.Pool, chunk, p)
		if err != nil {
			return res, &StoppedError{Done: start, Err: err}
		}
		for _, r := range out {
			k := KeyResult{ErasureResult: r}
			if r.Status == store.ErasureNotFound && hints < req.Hints {
				hints++
				k.StoredUnder, _ = s.st.MessageSources(ctx, s.st.Pool, r.ExternalID)
			}
			res.add(k)
		}
	}
	return res, nil
}
