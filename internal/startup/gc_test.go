package startup

import (
	"runtime/debug"
	"testing"
)

// TestSetGC: the configuration's settings apply unless the environment
// names its own, which then stay as the runtime set them.
func TestSetGC(t *testing.T) {
	oldPercent, oldLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(oldPercent); debug.SetMemoryLimit(oldLimit) })
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")

	s := SetGC(150, 64)
	if s != (GCSettings{Percent: 150, LimitBytes: 64 << 20}) || debug.SetGCPercent(150) != 150 || debug.SetMemoryLimit(-1) != 64<<20 {
		t.Fatalf("from the configuration: %+v", s)
	}

	debug.SetGCPercent(80)
	debug.SetMemoryLimit(32 << 20)
	t.Setenv("GOGC", "80")
	t.Setenv("GOMEMLIMIT", "32MiB")
	s = SetGC(150, 64)
	if s != (GCSettings{Percent: 80, LimitBytes: 32 << 20, PercentFromEnv: true, LimitFromEnv: true}) ||
		debug.SetGCPercent(80) != 80 || debug.SetMemoryLimit(-1) != 32<<20 {
		t.Fatalf("from the environment: %+v", s)
	}
}
