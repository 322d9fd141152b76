package queue

import "testing"

func TestRedactURLs(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4299":                           "nats://127.0.0.1:4299",
		"nats://alice:s3cret@h1:4222, nats://tok@h2:4222": "nats://redacted@h1:4222,nats://redacted@h2:4222",
		"127.0.0.1:4222":                                  "127.0.0.1:4222",
	} {
		if got := redactURLs(in); got != want {
			t.Errorf("redactURLs(%q) = %q, want %q", in, got, want)
		}
	}
}
