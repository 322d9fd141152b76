package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// ErrorClass names what a provider failure says, so that the caller can
// tell "wait and retry" from "the request's fault" from "stop taking work
// and alert". Class returns it for any error of a call.
type ErrorClass string

// The classes of provider failures.
const (
	// ClassNone: no error, or an error that is not the provider's (the
	// caller's context was cancelled).
	ClassNone ErrorClass = ""
	// ClassRateLimited: 429 without insufficient_quota, or the client-side
	// limiter could not grant the call before its deadline. Wait and retry.
	ClassRateLimited ErrorClass = "rate_limited"
	// ClassQuotaExhausted: 429 with code insufficient_quota, or 402. The
	// account is out of credit: stop taking work and alert.
	ClassQuotaExhausted ErrorClass = "quota_exhausted"
	// ClassCredentials: 401 or 403 with a JSON body. The API key is wrong
	// or lacks access: stop taking work and alert.
	ClassCredentials ErrorClass = "credentials"
	// ClassProxyPage: a 4xx or 5xx whose body is not JSON, such as an HTML
	// 403 or 502 page from a proxy or gateway in front of the provider.
	// Not the message's fault: stop taking work and alert.
	ClassProxyPage ErrorClass = "proxy_page"
	// ClassEndpoint: 404 or 405 with a JSON body. The base URL or the model
	// name is wrong: stop taking work and alert.
	ClassEndpoint ErrorClass = "endpoint"
	// ClassServerError: 408 or 5xx with a JSON (or empty) body. Retry.
	ClassServerError ErrorClass = "server_error"
	// ClassConnection: no answer: connection refused or reset, DNS
	// failure, TLS failure or timeout. Retry.
	ClassConnection ErrorClass = "connection"
	// ClassMalformed: a 2xx chat completion whose body is not a chat
	// completion (not JSON, or no choices). Not the message's fault; retry
	// later.
	ClassMalformed ErrorClass = "malformed"
	// ClassBadRequest: 400, 413, 422 or another 4xx with a JSON body, such
	// as context_length_exceeded. The request's fault: retrying will not
	// mend it.
	ClassBadRequest ErrorClass = "bad_request"
	// ClassCircuitOpen: the circuit breaker refused the call without
	// sending it. Retry after the breaker closes (see Transport.WaitReady).
	ClassCircuitOpen ErrorClass = "circuit_open"
)

// MessageFault reports whether the failure is the request's own fault, so
// that the run should fail rather than be retried: only ClassBadRequest.
func (c ErrorClass) MessageFault() bool { return c == ClassBadRequest }

// Alert reports whether the failure needs an operator (credit, keys, a
// proxy or the configured endpoint): the worker should stop taking work
// and alert. It is never the message's fault.
func (c ErrorClass) Alert() bool {
	switch c {
	case ClassQuotaExhausted, ClassCredentials, ClassProxyPage, ClassEndpoint:
		return true
	}
	return false
}

// Transient reports whether the same call may succeed later without
// anyone's action: rate_limited, server_error, connection, malformed and
// circuit_open.
func (c ErrorClass) Transient() bool {
	switch c {
	case ClassRateLimited, ClassServerError, ClassConnection, ClassMalformed, ClassCircuitOpen:
		return true
	}
	return false
}

// Error is a failed provider call as the Transport returns it: go-openai
// wraps it (in a *url.Error from net/http), and errors.As finds it.
type Error struct {
	// Class is what the failure says; see the Class constants.
	Class ErrorClass
	// StatusCode is the HTTP status of the last answer; 0 when there was
	// none (connection error, timeout, client-side limit, open breaker).
	StatusCode int
	// Code and Type are the provider's error code and type from a JSON
	// error body ("insufficient_quota", "context_length_exceeded", ...).
	Code string
	Type string
	// Message is the provider's error message from a JSON body, cut to 200
	// characters. A non-JSON body is never copied here.
	Message string
	// RetryAfter is the wait the provider asked for (Retry-After,
	// retry-after-ms), if any.
	RetryAfter time.Duration
	// Attempts is how many requests were sent for this call.
	Attempts int
	// Err is the underlying error: the network error, gobreaker's open
	// state error, the decoding error of a ClassMalformed reply, or nil for
	// an HTTP answer.
	Err error
	// Body is the body of a ClassMalformed answer (a 2xx that is not a
	// chat completion), its first 64 KiB, and BodySize its whole size in
	// bytes; nil and 0 for other failures. The body may echo the customer's
	// text: it is never in Error() nor logged.
	Body     []byte
	BodySize int

	// local marks a refusal made here (client-side limiter, breaker)
	// without asking the provider; the breaker does not count it.
	local bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("provider: ")
	b.WriteString(string(e.Class))
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.StatusCode)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// retried reports whether the Transport retries a failure of this kind:
// connection errors, 408, 429 (not insufficient_quota) and every 5xx,
// whatever its body.
func (e *Error) retried() bool {
	switch e.Class {
	case ClassConnection, ClassRateLimited, ClassServerError:
		return true
	case ClassProxyPage:
		return e.StatusCode >= 500
	}
	return false
}

// Class returns the class of an error from a provider call: a *Error
// anywhere in err's chain (what the Transport returns), else go-openai's
// *openai.APIError or *openai.RequestError classified by status and body
// (a client without the Transport), else a timeout or other network error
// as ClassConnection and a JSON decoding error as ClassMalformed. It
// returns ClassNone for nil and for context.Canceled.
func Class(err error) ErrorClass {
	if err == nil {
		return ClassNone
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Class
	}
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		code, _ := apiErr.Code.(string)
		return classify(apiErr.HTTPStatusCode, true, code, apiErr.Type)
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) {
		b := errorBodyOf(reqErr.Body)
		return classify(reqErr.HTTPStatusCode, b.json, b.Code, b.Type)
	}
	if errors.Is(err, openai.ErrChatCompletionInvalidModel) || errors.Is(err, openai.ErrChatCompletionStreamNotSupported) ||
		errors.Is(err, openai.ErrContentFieldsMisused) {
		return ClassBadRequest
	}
	var synErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &synErr) || errors.As(err, &typeErr) {
		return ClassMalformed
	}
	if errors.Is(err, context.Canceled) {
		return ClassNone
	}
	return ClassConnection
}

// classify maps an HTTP error status to a class. isJSON says whether the
// body was JSON (or empty); code and typ are the provider's error code and
// type.
func classify(status int, isJSON bool, code, typ string) ErrorClass {
	switch {
	case status == http.StatusTooManyRequests:
		if code == "insufficient_quota" || typ == "insufficient_quota" {
			return ClassQuotaExhausted
		}
		return ClassRateLimited
	case status >= 500:
		if !isJSON {
			return ClassProxyPage
		}
		return ClassServerError
	case status == http.StatusRequestTimeout:
		return ClassServerError
	case status >= 400 && !isJSON:
		return ClassProxyPage
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ClassCredentials
	case status == http.StatusPaymentRequired:
		return ClassQuotaExhausted
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		return ClassEndpoint
	case status >= 400:
		return ClassBadRequest
	}
	// A 1xx, 2xx or 3xx never reaches here as an error from the Transport;
	// go-openai calls anything below 200 a failure.
	return ClassMalformed
}

// errorBody is what a JSON error body says.
type errorBody struct {
	json    bool // empty, or a JSON object
	Code    string
	Type    string
	Message string
}

// errorBodyOf reads OpenAI's {"error": {"code", "type", "message"}} and
// the common variants ({"error": "text"}, {"message": "text"}).
func errorBodyOf(body []byte) errorBody {
	t := bytes.TrimSpace(body)
	if len(t) == 0 {
		return errorBody{json: true}
	}
	var top map[string]json.RawMessage
	if t[0] != '{' || json.Unmarshal(t, &top) != nil {
		return errorBody{}
	}
	out := errorBody{json: true}
	raw := top["error"]
	var inner map[string]json.RawMessage
	if json.Unmarshal(raw, &inner) != nil {
		inner = top
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out.Message = s
		}
	}
	out.Code = jsonScalar(inner["code"])
	out.Type = jsonScalar(inner["type"])
	if m := jsonScalar(inner["message"]); m != "" {
		out.Message = m
	}
	out.Message = shorten(out.Message, 200)
	return out
}

// jsonScalar returns a JSON string's value or a number's text; "" else.
func jsonScalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// responseError classifies an HTTP error answer.
func responseError(status int, h http.Header, body []byte) *Error {
	b := errorBodyOf(body)
	e := &Error{Class: classify(status, b.json, b.Code, b.Type), StatusCode: status, Code: b.Code, Type: b.Type,
		RetryAfter: retryAfter(h, time.Now())}
	if b.json {
		e.Message = b.Message
	} else {
		e.Message = fmt.Sprintf("non-JSON body (%s, %d bytes)", contentType(h), len(body))
	}
	return e
}

func contentType(h http.Header) string {
	ct := h.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	if ct == "" {
		return "no content type"
	}
	return strings.TrimSpace(ct)
}

// checkCompletion reports whether body is a chat completion: a JSON
// object with a non-empty choices array that decodes as go-openai's
// ChatCompletionResponse, the way go-openai decodes it (the first JSON
// value of the body). It returns the value decoded, which is go-openai's
// own decoding of body: decoded in one pass here when body has the common
// shape (decodeCompletion), by encoding/json otherwise.
func checkCompletion(body []byte) (openai.ChatCompletionResponse, error) {
	var c openai.ChatCompletionResponse
	t := bytes.TrimSpace(body)
	if len(t) == 0 || t[0] != '{' {
		return c, errors.New("body is not a JSON object")
	}
	if fc, ok := decodeCompletion(t); ok {
		c = fc
	} else if err := json.NewDecoder(bytes.NewReader(t)).Decode(&c); err != nil {
		return c, fmt.Errorf("body is not a chat completion: %w", err)
	}
	if len(c.Choices) == 0 {
		return c, errors.New("chat completion has no choices")
	}
	return c, nil
}
