package store

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// ValueError is a statement refused for a value it was given, not for
// the state of the database or the connection: SQLSTATE class 22 (data
// exception: a number jsonb cannot hold, 22003; an escape it refuses,
// 22P05; bytes that are not UTF-8, 22021) or class 54 (program limit
// exceeded: an index row too large, 54000), or a key the store refuses
// before sending it (MessageIngest). The same statement fails the same way
// on every try, so it is never Transient: the caller rejects the one
// input that carried the value.
type ValueError struct {
	// Field names the value refused, as the input names it ("id",
	// "source", "metadata"), when the store can tell; else "".
	Field string
	// Code is the SQLSTATE, "" when the store refused the value itself.
	Code string
	// Reason is what is wrong, from Postgres's message when it refused.
	Reason string
}

func (e *ValueError) Error() string {
	var b strings.Builder
	if e.Field != "" {
		fmt.Fprintf(&b, "%q: ", e.Field)
	}
	b.WriteString(e.Reason)
	if e.Code != "" {
		fmt.Fprintf(&b, " (SQLSTATE %s)", e.Code)
	}
	return b.String()
}

// pgKeyIndex is the unique index of a message's key (migration 000001).
const pgKeyIndex = "messages_source_external_id_key"

// valueError returns err as a *ValueError when Postgres refused a value
// (SQLSTATE class 22 or 54), else nil.
func valueError(err error) *ValueError {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !(strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "54")) {
		return nil
	}
	ve := &ValueError{Code: pgErr.Code, Reason: "the database refused a value: " + pgErr.Message}
	switch {
	case pgErr.ColumnName == "external_id":
		ve.Field = "id"
	case pgErr.ColumnName != "":
		ve.Field = pgErr.ColumnName
	case strings.Contains(pgErr.Message, pgKeyIndex):
		// An index row too large: the key is too long to index.
		ve.Field = "id"
		ve.Reason = `the database refused "id" with "source" as too long to index: ` + pgErr.Message
	}
	return ve
}

// CheckKeyText refuses a message key's part (field names it: "id",
// "source") that Postgres could store only by rewriting it: a NUL byte
// or bytes that are not UTF-8. A key is stored and compared byte for
// byte, so two keys must never become one. The error is a *ValueError
// naming the byte (from 1).
func CheckKeyText(field, s string) error {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return &ValueError{Field: field, Reason: fmt.Sprintf("is not valid UTF-8: byte %d is 0x%02X; it is kept byte for byte, so it is refused rather than changed", i+1, s[i])}
		case r == 0:
			return &ValueError{Field: field, Reason: fmt.Sprintf("contains a NUL character at byte %d", i+1)}
		}
		i += size
	}
	return nil
}
