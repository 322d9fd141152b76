package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Transient reports whether err is Postgres being unreachable for a while
// rather than a fault of the statement: a lost or refused connection,
// SQLSTATE class 08 (connection exception), 57P01-57P03 (shutdown,
// restart, cannot connect now), 53300 (too many connections) or 40001 and
// 40P01 (serialization failure, deadlock). Such a statement can be run
// again once the server is back. A pooler refusing a session setting of
// the URL (08P01 "unsupported startup parameter") is no such thing: it
// refuses every connection the same way.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case isUnsupportedStartupParam(pgErr):
			return false
		case strings.HasPrefix(pgErr.Code, "08"),
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03",
			pgErr.Code == "53300", pgErr.Code == "40001", pgErr.Code == "40P01":
			return true
		}
		return false
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// MaybeCommitted reports whether a write that failed with err may have
// been committed all the same: its COMMIT was sent (InTx,
// RunOutcomeInsertMany) but no answer came back, the connection lost or
// the deadline passed, so the reply may be what was lost. A COMMIT that
// Postgres answered with an error (*pgconn.PgError) rolled back, and an
// error before the COMMIT wrote nothing.
func MaybeCommitted(err error) bool {
	var ce *commitError
	if !errors.As(err, &ce) {
		return false
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}

// Retry runs op until it succeeds, fails with an error that is not
// Transient, or maxElapsed passes (then the last error is returned), with
// exponential backoff from 100ms to 5s between tries. It stops when ctx is
// done.
func Retry(ctx context.Context, maxElapsed time.Duration, op func() error) error {
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := op()
		if err != nil && !Transient(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(&backoff.ExponentialBackOff{
		InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.3, Multiplier: 2, MaxInterval: 5 * time.Second,
	}), backoff.WithMaxElapsedTime(maxElapsed))
	return err
}
