package startup

import (
	"os"
	"runtime/debug"
)

// GCSettings are what SetGC applied: the garbage collector's percent
// (GOGC) and soft memory limit in bytes (GOMEMLIMIT; 0 for none), and
// whether each came from the environment rather than the configuration.
type GCSettings struct {
	Percent                      int
	LimitBytes                   int64
	PercentFromEnv, LimitFromEnv bool
}

// SetGC sets the garbage collector's percent and soft memory limit (MB,
// 0 for none) at start, unless the environment sets GOGC or GOMEMLIMIT,
// which the Go runtime has applied already and which then win, so an
// operator can still override a configuration without editing it. The
// memory limit is soft: the collector runs more often as the process
// nears it, and never stops the process (runtime/debug.SetMemoryLimit).
func SetGC(percent, limitMB int) GCSettings {
	var s GCSettings
	if os.Getenv("GOGC") != "" {
		s.PercentFromEnv = true
		s.Percent = debug.SetGCPercent(100)
		debug.SetGCPercent(s.Percent)
	} else if percent > 0 {
		debug.SetGCPercent(percent)
		s.Percent = percent
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		s.LimitFromEnv = true
		s.LimitBytes = debug.SetMemoryLimit(-1)
	} else if limitMB > 0 {
		s.LimitBytes = int64(limitMB) << 20
		debug.SetMemoryLimit(s.LimitBytes)
	}
	return s
}
