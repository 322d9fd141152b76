package httpguard_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
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

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host, forwardedProto string
		tls                  bool
		url                  string
		want                 bool
	}{
		{host: "127.0.0.1:8090", url: "http://127.0.0.1:8090", want: true},
		{host: "127.0.0.1:8090", url: "http://127.0.0.1:8090/v1/messages?x=1", want: true}, // a Referer
		{host: "LocalHost:8090", url: "http://localhost:8090", want: true},
		{host: "[::1]:8090", url: "http://[::1]:8090", want: true},
		{host: "ingest.example.com", url: "http://ingest.example.com:80", want: true},
		{host: "ingest.example.com:80", url: "http://ingest.example.com", want: true},
		{host: "ingest.example.com", tls: true, url: "https://ingest.example.com", want: true},
		{host: "ingest.example.com", tls: true, url: "https://ingest.example.com:443", want: true},
		{host: "ingest.example.com", forwardedProto: "https", url: "https://ingest.example.com", want: true},

		{host: "127.0.0.1:8090", url: "https://127.0.0.1:8090"},                   // https origin, http server
		{host: "ingest.example.com", tls: true, url: "http://ingest.example.com"}, // http origin, https server
		{host: "ingest.example.com", forwardedProto: "https", url: "http://ingest.example.com"},
		{host: "ingest.example.com", url: "https://ingest.example.com"},
		{host: "ingest.example.com", tls: true, url: "https://ingest.example.com:80"},
		{host: "127.0.0.1:8090", url: "http://127.0.0.1:8091"},
		{host: "127.0.0.1:8090", url: "http://127.0.0.1"},
		{host: "127.0.0.1:8090", url: "http://localhost:8090"},
		{host: "127.0.0.1:8090", url: "http://evil.example"},
		{host: "127.0.0.1:8090", url: "http://127.0.0.1.evil.example:8090"},
		{host: "127.0.0.1:8090", url: "null"},
		{host: "127.0.0.1:8090", url: ""},
		{host: "127.0.0.1:8090", url: "127.0.0.1:8090"},
		{host: "127.0.0.1:8090", url: "http://user@127.0.0.1:8090"},
		{host: "127.0.0.1:8090", url: "file:///etc/passwd"},
		{host: "", url: "http://"},
		{host: "", url: "http://:80"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Host = tt.host
		r.TLS = nil
		if tt.tls {
			r.TLS = &tls.ConnectionState{}
		}
		if tt.forwardedProto != "" {
			r.Header.Set("X-Forwarded-Proto", tt.forwardedProto)
		}
		if got := httpguard.SameOrigin(r, tt.url); got != tt.want {
			t.Errorf("SameOrigin(Host %q, TLS %v, X-Forwarded-Proto %q; %q) = %v, want %v", tt.host, tt.tls, tt.forwardedProto, tt.url, got, tt.want)
		}
	}
}
