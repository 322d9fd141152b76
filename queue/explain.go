package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server errors of JetStream out of storage (nats-server's
// server/errors.json): "insufficient resources" (JSInsufficientResourcesErr,
// its max_file_store reached or its disk full), "insufficient storage
// resources available" (JSStorageResourcesExceededErr) and "resource
// limits exceeded for account" (JSAccountResourcesExceededErr).
const (
	errCodeInsufficientResources    jetstream.ErrorCode = 10023
	errCodeStorageResourcesExceeded jetstream.ErrorCode = 10047
	errCodeAccountResourcesExceeded jetstream.ErrorCode = 10002
)

// IsOutOfStorage reports whether a publish was refused because JetStream's
// storage is exhausted (errors 10023, 10047 or 10002). Nothing was
// stored; it may succeed once space is freed.
func IsOutOfStorage(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeInsufficientResources, errCodeStorageResourcesExceeded, errCodeAccountResourcesExceeded:
		return true
	}
	return false
}

// IsRetryable reports whether a publish that failed with err may succeed
// later without anything changing on the publisher's side: NATS not
// connected, no responders, a timeout, the stream full (IsStreamFull) or
// JetStream out of storage (IsOutOfStorage).
func IsRetryable(err error) bool {
	return transient(err) || IsStreamFull(err) || IsOutOfStorage(err) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected)
}

// Explain says in words what NATS answered with err, a publish's error on
// stream: its storage exhausted, the stream full, nobody answering, or
// no answer at all in time. Other errors are returned as they are.
func Explain(err error, stream string) string {
	desc := ""
	if err != nil {
		desc = err.Error()
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		desc = apiErr.Description
	}
	switch {
	case err == nil:
		return ""
	case IsOutOfStorage(err):
		return fmt.Sprintf("NATS is out of storage: JetStream answered %q (error %d): free disk space on the NATS server, or raise its JetStream max_file_store",
			desc, apiErr.ErrorCode)
	case IsStreamFull(err):
		return fmt.Sprintf("stream %s is full: JetStream answered %q (its max_msgs or max_bytes: configuration nats.max_msgs, nats.max_bytes) "+
			"and no worker drained it: start workers, or raise the limits", stream, desc)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Sprintf("no responders: no JetStream server answered for stream %s (is JetStream enabled and running, with storage left, "+
			"and does the stream exist?)", stream)
	case errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return "not connected to NATS: the connection is lost and being re-established (is the NATS server up?)"
	case errors.Is(err, nats.ErrConnectionClosed):
		return "the NATS connection is closed"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Sprintf("NATS did not answer in time (%v): the server may be down or unreachable, or JetStream disabled "+
			"(it disables itself when its disk is full: see the server's log)", err)
	}
	return err.Error()
}

// ExplainRank orders errors by how much Explain can say of them, for a
// caller that retried and keeps the most telling answer: the server's
// own refusal (storage, stream full) over no responders, over a lost
// connection, over a timeout.
func ExplainRank(err error) int {
	switch {
	case err == nil:
		return 0
	case IsOutOfStorage(err), IsStreamFull(err):
		return 4
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return 3
	case errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionClosed):
		return 2
	}
	return 1
}
