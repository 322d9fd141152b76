// Package provider is the resilience layer under the LLM client: an
// http.RoundTripper (Transport) that go-openai sends through, which
// retries, paces, classifies and breaks calls to an OpenAI-compatible API.
// It has no NATS or SQL; the pipeline imports it for the error classes.
//
// # Wiring
//
//	tr := provider.New(cfg.Provider, nil, registry, log)
//	client := provider.NewChatClient(tr, baseURL, apiKey)
//
// Share one Transport per process: its limiters and breaker must see every
// call. NewChatClient is optional: a plain go-openai client over
// tr.Client() (or NewChat of one) works the same, but go-openai encodes
// each request (NewChatClient writes the same bytes with less work), and
// a plain client decodes each reply a second time after the Transport's
// check (see Chat).
//
// # Retries
//
// Timeouts, connection errors, 408, 429 and 5xx are retried with
// exponential backoff and jitter (InitialInterval, Multiplier,
// MaxInterval, ±50%), waiting at least what the provider asks in
// retry-after-ms or Retry-After (seconds or an HTTP date), at most
// MaxRetries times and within MaxElapsedTime and the request context's
// deadline. A 400 (context_length_exceeded and the like), 401, 403, a
// quota 429 and a non-JSON 4xx page are never retried. The request body is
// buffered and replayed on each attempt.
//
// # Errors
//
// A failed call returns a *Error with its ErrorClass; go-openai returns it
// wrapped (in net/http's *url.Error), and Class(err) finds it anywhere in
// the chain, also classifying go-openai's own error types for a client
// without the Transport:
//
//	rate_limited     429: wait and retry
//	server_error     408, 5xx: retry
//	connection       refused, reset, DNS, TLS, timeout: retry
//	malformed        a 2xx that is not a chat completion go-openai can decode: retry later
//	circuit_open     refused by the breaker without sending: retry later
//	quota_exhausted  429 insufficient_quota, 402: stop taking work, alert
//	credentials      401, 403 with a JSON body: stop taking work, alert
//	proxy_page       a 4xx/5xx whose body is not JSON (a proxy's page): stop, alert
//	endpoint         404, 405 with a JSON body (base URL or model): stop, alert
//	bad_request      400 and other 4xx: the request's fault, not retried
//
// ErrorClass.MessageFault, Alert and Transient group them. A malformed
// *Error carries the body (its first 64 KiB) and its size, so that the
// caller can record the answered call; Error() never shows the body.
//
// # Replies
//
// A 2xx chat completion is read whole and decoded as go-openai decodes it
// before go-openai sees it. Tool-call arguments sent as a JSON object
// instead of the JSON string OpenAI's API specifies (llama.cpp server,
// ggml-org/llama.cpp#20198) are rewritten once, here, as the string
// holding the object's compact JSON text; every other byte of the reply
// is kept. Each such reply is counted in
// extractq_provider_tool_arguments_rewritten_total and logged at debug.
//
// # Rate limits
//
// RequestsPerMinute spaces requests evenly (a burst of one);
// TokensPerMinute charges each request a quarter of the bytes of its
// messages, tools and response_format plus its max_completion_tokens, from
// a bucket that holds a minute's worth. When an answer's
// x-ratelimit-remaining-requests or -tokens is 0, every call waits until
// the matching x-ratelimit-reset-* ("1s", "6m0s", "20ms") before its next
// request. A wait that would pass the request's deadline fails at once
// with a rate_limited *Error instead.
//
// # Circuit breaker
//
// Consecutive failed calls (retries spent, or quota_exhausted,
// credentials, proxy_page, endpoint, malformed) open the breaker after
// BreakerFailures; it refuses calls (circuit_open) for BreakerCooldown,
// then lets one probe through. A worker should check Ready before fetching
// work, or block in WaitReady.
//
// # Metrics
//
// Registered on the prometheus.Registerer given to New:
// extractq_provider_calls_total{result,class},
// extractq_provider_retries_total{class},
// extractq_provider_rate_limit_wait_seconds_total{reason},
// extractq_provider_breaker_state (0 closed, 1 half-open, 2 open) and
// extractq_provider_tool_arguments_rewritten_total.
package provider
