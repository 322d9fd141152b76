// Package queue is the product's JetStream layer: the runs stream, the
// worker's durable pull consumer, publishing runs with a dedup key, and a
// consume loop with bounded in-flight work.
//
// # Messages
//
// Each run of a message (run 1 from ingest, later runs from a re-run) is one
// stream message whose body is an [Envelope] in JSON: the message id, run
// number, batch and schema, never the customer's text, which stays in
// Postgres. Runs are published on config.NATS.RunsSubject(schema id), with
// the header Nats-Msg-Id set to a key per (message, run), for example
// [Envelope.DedupID]. Within the stream's dedup window a second publish of
// the same key stores nothing and [Publisher.Publish] reports it as a
// duplicate; a re-run has a new key and is stored.
//
// # Connecting and setting up
//
// [Connect] retries the first connection for up to [ConnectTimeout], then
// reconnects forever and logs every disconnect and reconnect.
// [EnsureStream] creates or updates the work-queue stream (a message is
// removed once acked, direct get allowed); [EnsureConsumers] creates or
// updates the workers' durable pull consumers: one shared consumer, or one
// per schema (config.NATS.Consumers), deleting the other mode's once they
// are idle. Both are idempotent, so every process may call them at start.
//
// # Redelivery
//
// The consumer has explicit acks, a MaxDeliver limit and a BackOff schedule
// (see [BackOffSchedule]): the first delivery's ack wait is
// config.Worker.AckWait, each next one twice the last, up to 15 minutes. A
// handler that runs longer than the ack wait keeps its message with
// in-progress signals, which [Run] sends for it. nats-server 2.9 requires
// AckWait to equal the first BackOff step (it silently replaces any other
// value), so [ConsumerConfig] sets both alike. When [Delivery.LastDelivery]
// is true, the server will not deliver the message again: a nak, or a
// worker that dies or stalls on it, sends the server's max-deliveries
// advisory ([RunDeadLetter] consumes them).
//
// Every delivery counts towards MaxDeliver, a nak's too. So a handler that
// cannot finish the run for a reason that is not the message's (the
// provider or the database failed, a shutdown) returns [Requeue]: the run
// goes back on the stream as a new message whose deliveries count from 1,
// and only deliveries the message itself ended (a panic, a worker that
// died or stalled) spend its limit.
//
// # Consuming
//
// [Run] takes a message only into a free slot, so a worker never holds
// more than ConsumerOptions.Concurrency messages: a few long-lived pull
// consumptions ask the server for one message each time a slot frees
// (no subscription per fetch), and a fixed pool of Concurrency
// goroutines handles them. The [Handler] returns a [Decision]: [Ack] (confirmed by the
// server before the slot is freed), [Nak] with a delay, [Requeue] or
// [Term]. Acks can be lost, so handlers must be idempotent; the worker
// checks whether a run already has an outcome before it calls the LLM. A
// body that is not a valid Envelope is termed; a handler panic is recovered
// and its message nakked with a delay. On shutdown Run stops fetching and
// gives in-flight handlers ConsumerOptions.ShutdownGrace before cancelling
// them.
//
// # Server versions
//
// Only features of nats-server 2.9 are used: one filter subject per
// consumer, no metadata or priority groups. A term with a reason is ignored
// by servers before 2.10.4 (the message is redelivered), so Run sends a
// plain term unless ConsumerOptions.TermWithReason is set, which callers
// take from [TermReasonSupported].
//
// # Backlog
//
// [Pending] returns the consumer's undelivered plus unacked messages, for
// progress display and for scaling workers on the backlog.
package queue
