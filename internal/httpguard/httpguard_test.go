package httpguard_test

import (
	"testing"

	"github.com/extractq/extractq/internal/httpguard"
)

func TestIsLoopbackHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"localhost:8090", true},
		{"LocalHost:8090", true},
		{"localhost.:8090", true},
		{"api.localhost:8090", true},
		{"a.b-c.localhost", true},
		{"127.0.0.1", true},
		{"127.0.0.1:8090", true},
		{"127.1.2.3:8090", true},
		{"[::1]", true},
		{"[::1]:8090", true},
		{"::1", true},
		{"[::ffff:127.0.0.1]:8090", true},

		{"", false},
		{":8090", false},
		{"evil.example", false},
		{"evil.example:8090", false},
		{"localhost.evil.example:8090", false},
		{"evillocalhost:8090", false},
		{".localhost:8090", false},
		{"a..localhost", false},
		{"-a.localhost", false},
		{"a_b.localhost", false},
		{"0.0.0.0:8090", false},
		{"[::]:8090", false},
		{"10.0.0.1:8090", false},
		{"128.0.0.1:8090", false},
		{"127.1:8090", false}, // not an address net.ParseIP reads; browsers send 127.0.0.1
		{"2130706433", false}, // 127.0.0.1 as one number: a name, not an address
		{"[localhost]:8090", false},
	}
	for _, tt := range tests {
		if got := httpguard.IsLoopbackHost(tt.host); got != tt.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}
