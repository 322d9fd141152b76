package startup

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// StartCPUProfile writes a CPU profile of this process to path (the format
// of `go tool pprof`) until the returned stop is called, as
// `go test -cpuprofile` does. An empty path profiles nothing. Errors are
// those of creating the file or of starting the profiler.
func StartCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
