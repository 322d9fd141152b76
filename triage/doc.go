// Package triage is the human triage queue: the web UI and JSON API where
// reviewers fix, approve, reject or re-run the runs the model got wrong
// (cmd/triage serves it).
//
// # Serving
//
// New builds a Server from a Config (the store, the schemas in use as the
// worker has them, an optional queue.Publisher for re-runs). Install
// registers every route on a ServeMux with Go 1.22 method patterns;
// Handler adds the security headers. Run serves until its context ends,
// and without any reviewer account it serves on a loopback address only,
// everyone acting as LocalReviewer.
//
// # Routes
//
// Pages: GET / (the queue), GET /queue/live (its live part), GET /events
// (server-sent events when the queue changes), POST /claim-next, GET
// /items/{id}, POST /items/{id}/{claim,release,check,approve,reject,rerun},
// GET and POST /rerun (bulk re-run), GET /audit, GET and POST /login, POST
// /logout. API: /api/v1/me, items, items/counts, items/claim-next,
// items/{id}, items/{id}/{claim,release,validate,approve,reject,rerun},
// rerun/count, rerun, messages/{id}/result, audit. docs/triage.md has
// curl examples.
//
// # Errors
//
// Handlers return errors; codeOf maps the categories of errors.go (and
// the store's ErrNotFound, ErrClaimed, ErrItemClosed, ErrCountChanged) in
// one place to a code of the product's one error table (internal/httperr,
// shared with ingest serve), which gives the HTTP status; pages show an
// error page, the API answers {"error": {"code", "message"}}
// (httperr.Write; docs/http-errors.md lists the codes). Server errors are
// logged, never shown.
//
// # Validation
//
// A reviewer's record is validated by the worker's validator
// (pipeline.Schema.Validate: JSON Schema, key case, grounding against the
// message text). Only grounding errors may be overridden, and only with a
// written reason; the approval then records the overridden errors.
//
// # Untrusted text
//
// Customer text and model replies reach pages only through html/template,
// which escapes them. Control and format characters (bidi overrides,
// zero-width characters, C0/C1 controls) are shown as inert markers
// (Segments, Visible), messages sit in a unicode-bidi: plaintext block and
// short values in <bdi>. The Content-Security-Policy allows scripts and
// styles from /static/ only; the page script writes customer text only as
// textContent, or as HTML the server rendered with the same templates.
// A query or path value that is not UTF-8 text or holds a NUL byte, which
// Postgres text cannot hold, never reaches the store: the API and the
// pages that act on a link refuse it (400 naming it), the pages reached
// from bookmarks leave it out and say so (link.go). Reasons and notes are
// stored as the store cleans them (store.CleanText).
//
// # People and safety
//
// Reviewer accounts and API tokens are made by Admin (cmd/triage admin).
// Sessions live in Postgres (alexedwards/scs, pgxstore) behind an
// HttpOnly, Secure, SameSite=Lax cookie; every state-changing request made
// with a session carries the session's CSRF token and must come from this
// origin: the same scheme, host and port (Config.PublicURL behind a
// proxy). Request bodies are capped per route before anything reads them
// (body_limit.go). Claims are leases taken with FOR UPDATE SKIP LOCKED; every
// action is written to the audit log in the transaction that makes it.
package triage
