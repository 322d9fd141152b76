// Package store is the product's Postgres access: every query of the
// product's services and commands lives in this package. Only the
// development harnesses (cmd/bench, cmd/chaos) query the tables directly,
// to check the product from outside.
//
// # Shape
//
// Methods are named noun first (MessageIngest, RunOutcomeInsert,
// TriageItemList), as river's riverdriver names them. Each takes a ctx, a
// DBTX to run on and, where it needs more than a key, a …Params struct, and
// returns the package's own types, never pgx types.
//
// DBTX is satisfied by both *pgxpool.Pool and pgx.Tx, so the caller decides
// what is one transaction:
//
//	err := st.InTx(ctx, func(tx store.DBTX) error {
//		run, err := st.RunLockForOutcome(ctx, tx, store.RunGetParams{MessageID: id, RunNo: no})
//		if err != nil {
//			return err
//		}
//		if run.Status != store.RunQueued {
//			return nil // a redelivery: the outcome is already stored
//		}
//		return st.RunOutcomeInsert(ctx, tx, outcome)
//	})
//
// # Where the SQL is
//
// The SQL sits in the file of the method that runs it, in one of three
// forms. About half the statements, most of the longer ones, are named
// constants beside their method (messageIngestSQL, outcomeWriteSQL,
// triageItemClaimSQL, ...). Short single-use statements (a row lock, a
// count, a one-row update, the migrations' bookkeeping) are written inline
// at the call. The triage queue's filtered queries (the list, its counts
// and neighbours, an item's detail, claim next, the bulk re-run) are built
// at run time from fixed fragments (triageFrom, triageQueueColumns and
// TriageFilter's conditions), with every value passed as a $n placeholder,
// never spliced into the text. Column lists that several statements share
// are constants too (messageColumns, runColumns, reviewerColumns).
//
// # Errors
//
// Driver errors are translated at the boundary: no row becomes ErrNotFound,
// a unique violation becomes ErrConflict or ErrOutcomeExists. Returned
// errors wrap these with the operation and key, as in
// `store.MessageIngest("crm", "A-1"): ...: conflict`; match them with
// errors.Is.
//
// # Message life
//
// MessageIngest writes a message and its run 1 atomically, or reports a
// duplicate (same content hash) or a conflict (different hash, never
// overwritten). The run's dedup id (random, set at insert) is what the queue
// publish carries. RunMarkPublished records the queue's acceptance and the
// copy's stream sequence, RunListUnpublished finds runs a sweeper must
// publish again and RunListToCheck those the reconciler looks for on the
// stream (package relay); RunLeaseTake gives a run to one worker at a time.
// RunOutcomeInsert writes the outcome of a run once: calls, then the
// extraction or the triage item, then the failure events.
// LLMCallInsertSuperseded writes, on their own, the paid calls of a
// delivery that did not decide its run (a nak, or another delivery's
// commit first; llm_calls.superseded), so that every paid call is in the
// ledger while the run's outcome is still read from its own calls.
//
// # Text Postgres refuses
//
// Text columns refuse NUL bytes and invalid UTF-8, jsonb also refuses the
// escapes \u0000 and lone surrogates. The store replaces them with U+FFFD in
// what it writes from replies and messages (see CleanText and CleanJSON), so
// a bad model reply cannot make the outcome transaction fail.
//
// # Connections
//
// Open connects with the configuration PoolConfig makes from the database
// URL: the one place where pgx's settings are chosen. The URL's pooler
// parameter (PoolerParam) says what stands between the product and
// Postgres: nothing or a pooler in session pooling (the default, pgx's own
// settings), or a pooler in transaction pooling such as PgBouncer
// (pooler=transaction: no named prepared statements, as Pooler describes).
// Nothing the store does keeps session state between transactions: its
// one setting is SET LOCAL, its one advisory lock (the migrators') is held
// in a transaction, and it uses neither LISTEN nor temporary tables.
//
// # Migrations
//
// Migrate, MigrateDown and MigrateStatus run the embedded migrations of
// package migrations with goose, one transaction per version, into the
// current schema (search_path), directly or through a pooler in
// transaction pooling; EnsureDatabase creates the database. The storetest
// package gives each test a schema of its own, or a database of its own
// behind a private PgBouncer.
package store
