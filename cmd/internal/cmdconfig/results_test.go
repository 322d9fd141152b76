package cmdconfig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/store/storetest"
)

// TestResultsSwitchOnlyTurnsOn: a start with results.enabled true turns
// the deployment's outbox on; a later start with it false refuses, naming
// the key, the database's state and the way to turn it off, and leaves
// the outbox on (it does not stop every worker's stream); once turned off
// on purpose (what `migrate results-off` calls), a start with it false
// starts.
func TestResultsSwitchOnlyTurnsOn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	on := func() bool {
		t.Helper()
		s, err := st.ResultsOutboxStateGet(ctx, st.Pool)
		if err != nil {
			t.Fatal(err)
		}
		return s.Enabled
	}
	if err := st.ResultsOutboxEnable(ctx, st.Pool, false); err != nil {
		t.Fatal(err)
	}
	var off, enabled config.Config
	enabled.Results.Enabled = true

	if err := cmdconfig.ResultsSwitch(ctx, off, st); err != nil || on() {
		t.Fatalf("off on an off database: %v, on %t; want nil, off", err, on())
	}
	if err := cmdconfig.ResultsSwitch(ctx, enabled, st); err != nil || !on() {
		t.Fatalf("on: %v, on %t; want nil, on", err, on())
	}
	err := cmdconfig.ResultsSwitch(ctx, off, st)
	if err == nil {
		t.Fatal("a start with results.enabled false on a database whose stream is on started")
	}
	for _, want := range []string{"results.enabled", "stream is on", "migrate results-off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !on() {
		t.Fatal("a refused start turned the outbox off")
	}
	if _, err := cmdconfig.ResultsRelay(ctx, off, st, nil, nil, nil); err == nil || !on() {
		t.Fatalf("ResultsRelay with results.enabled false: %v, on %t; want the error, on", err, on())
	}
	if err := cmdconfig.ResultsSwitch(ctx, enabled, st); err != nil || !on() {
		t.Fatalf("on again: %v, on %t", err, on())
	}
	if err := st.ResultsOutboxEnable(ctx, st.Pool, false); err != nil {
		t.Fatal(err)
	}
	if err := cmdconfig.ResultsSwitch(ctx, off, st); err != nil || on() {
		t.Fatalf("off after turning it off: %v, on %t; want nil, off", err, on())
	}
}

// TestResultsSwitchWaitsForPostgres: a worker started while Postgres is
// unreachable (restarting, its connections reset) waits at the results
// switch until it is back, as it waits at OpenStore, instead of exiting
// with the reset connection's error (a chaos run's worker did).
func TestResultsSwitchWaitsForPostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	via, p := storetest.Proxied(t, st, 4)
	if err := via.ResultsOutboxEnable(ctx, via.Pool, false); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	var enabled config.Config
	enabled.Results.Enabled = true
	done := make(chan error, 1)
	go func() { done <- cmdconfig.ResultsSwitch(ctx, enabled, via) }()
	// Restore once the switch has been refused twice: it tried, failed
	// and tried again.
	for p.Refused() < 2 {
		select {
		case err := <-done:
			t.Fatalf("ResultsSwitch returned %v while Postgres was unreachable", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	p.Restore()
	if err := <-done; err != nil {
		t.Fatalf("ResultsSwitch after Postgres came back: %v", err)
	}
	s, err := st.ResultsOutboxStateGet(ctx, st.Pool)
	if err != nil || !s.Enabled {
		t.Fatalf("outbox state %+v, %v; want on", s, err)
	}
}
