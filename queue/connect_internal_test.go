package queue

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestVersionAtLeast(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		v    string
		want bool
	}{
		{"2.9.10", false},
		{"2.10.3", false},
		{"2.10.4", true},
		{"2.10.4-beta.1", true},
		{"v2.11.0", true},
		{"3.0.0", true},
		{"2.10", false},
		{"", false},
		{"junk", false},
	} {
		if got := versionAtLeast(tt.v, 2, 10, 4); got != tt.want {
			t.Errorf("versionAtLeast(%q, 2.10.4) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

// TestTransientDuplicateInProcess: a clustered stream's "duplicate message
// id is in process" (the first attempt still replicating after a leader
// change) is retried, wrapped or not; other API errors are not.
func TestTransientDuplicateInProcess(t *testing.T) {
	inProcess := &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}
	if !transient(inProcess) || !transient(fmt.Errorf("publish: %w", inProcess)) {
		t.Error("duplicate message id in process not retried")
	}
	if transient(&jetstream.APIError{Code: 400, ErrorCode: 10060, Description: "expected stream does not match"}) {
		t.Error("another API error retried")
	}
}
