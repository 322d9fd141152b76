package queue

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ConnectTimeout bounds how long Connect retries the first connection
// when ctx has no deadline.
const ConnectTimeout = 30 * time.Second

// Connect connects to the NATS server(s) at url (a comma-separated list is
// allowed) as client name, and returns the connection and its JetStream
// context.
//
// The first connection is retried with exponential backoff until ctx's
// deadline, or for up to ConnectTimeout when it has none, or until ctx is
// done. Once connected, the client
// reconnects forever; disconnects, reconnects, the close and asynchronous
// errors (such as a slow consumer) are logged on log. Connect also checks
// that the account has JetStream, so a server without it fails here rather
// than at the first publish (the check is retried while the server does
// not answer: a cluster electing its meta leader). The caller closes the connection (Drain or
// Close).
//
// extra are added after Connect's own options: the credentials and TLS
// material of SecurityOptions. A server refusing them (an authorization
// violation, an expired or revoked user, a certificate it or this client
// does not trust, a TLS requirement one side lacks) is not retried: the
// error says what was refused and which setting to check. When ctx ends
// first, the error holds the last attempt's error too.
func Connect(ctx context.Context, url, name string, log *zap.Logger, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("nats")
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(500*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil || nc.IsClosed() {
				// Our own Close or Drain: not worth a warning.
				log.Debug("nats disconnected", zap.Error(err))
				return
			}
			log.Warn("nats disconnected; reconnecting", zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", zap.String("server_url", nc.ConnectedUrlRedacted()))
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			log.Info("nats connection closed", zap.NamedError("last_error", nc.LastError()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Error("nats asynchronous error", zap.String("subject", subject), zap.Error(err))
		}),
	}
	opts = append(opts, extra...)

	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 250 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	attempt := 0
	start := time.Now()
	maxElapsed := ConnectTimeout
	if _, ok := ctx.Deadline(); ok {
		maxElapsed = 0 // until ctx's deadline
	}
	var last error // the last attempt's: what the server answered
	nc, err := backoff.Retry(ctx, func() (*nats.Conn, error) {
		attempt++
		nc, err := nats.Connect(url, opts...)
		last = err
		if err != nil {
			log.Warn("nats connect failed", zap.String("server", redactURLs(url)), zap.Int("attempt", attempt), zap.Error(err))
			if refused := refusal(err); refused != nil {
				return nil, backoff.Permanent(refused)
			}
			return nil, err
		}
		return nc, nil
	}, backoff.WithBackOff(bo), backoff.WithMaxElapsedTime(maxElapsed))
	if err != nil {
		if last != nil && !errors.Is(err, last) {
			// ctx ended between attempts: the last answer says why.
			err = fmt.Errorf("%w (last attempt: %w)", err, last)
		}
		return nil, nil, fmt.Errorf("queue.Connect: %s: %d attempts over %v: %w", redactURLs(url), attempt, time.Since(start).Round(time.Second), err)
	}
	log.Info("nats connected",
		zap.String("server_url", nc.ConnectedUrlRedacted()),
		zap.String("server_version", nc.ConnectedServerVersion()))

	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("queue.Connect: jetstream: %w", err)
	}
	// A cluster without its JetStream meta leader (quorum lost while
	// servers restart) does not answer JetStream requests: the check is
	// retried, each try bounded, within the same time as the connection.
	abo := backoff.NewExponentialBackOff()
	abo.InitialInterval = 250 * time.Millisecond
	abo.MaxInterval = 5 * time.Second
	remaining := time.Duration(0) // until ctx's deadline
	if maxElapsed > 0 {
		remaining = max(maxElapsed-time.Since(start), time.Second)
	}
	_, err = backoff.Retry(ctx, func() (*jetstream.AccountInfo, error) {
		actx, cancel := context.WithTimeout(ctx, accountCheckTimeout)
		defer cancel()
		ai, err := js.AccountInfo(actx)
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return nil, backoff.Permanent(err)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("jetstream account check failed; retrying", zap.String("server_url", nc.ConnectedUrlRedacted()), zap.Error(err))
		}
		return ai, err
	}, backoff.WithBackOff(abo), backoff.WithMaxElapsedTime(remaining))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("queue.Connect: jetstream account: %w", err)
	}
	return nc, js, nil
}

// accountCheckTimeout bounds one try of Connect's JetStream account check.
const accountCheckTimeout = 5 * time.Second

// TermReasonSupported reports whether the connected server honours a term
// with a reason (nats-server 2.10.4 and later). Older servers ignore such a
// term and redeliver the message, so Run sends a plain term to them; pass
// the result as ConsumerOptions.TermWithReason.
func TermReasonSupported(nc *nats.Conn) bool {
	return versionAtLeast(nc.ConnectedServerVersion(), 2, 10, 4)
}

// versionAtLeast compares a "major.minor.patch[-suffix]" version.
func versionAtLeast(v string, major, minor, patch int) bool {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	want := []int{major, minor, patch}
	for i, w := range want {
		if i >= len(parts) {
			return false
		}
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return false
		}
		if n != w {
			return n > w
		}
	}
	return true
}

// redactURLs returns a NATS server list (comma separated URLs) without
// user names, passwords or tokens, for error messages.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if u, err := url.Parse(p); err == nil && u.User != nil {
			u.User = url.User("redacted")
			p = u.String()
		} else if err != nil && strings.Contains(p, "@") {
			p = "(unparsable URL)"
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}
