package queue

import "testing"

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
