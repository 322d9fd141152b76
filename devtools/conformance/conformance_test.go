package conformance_test

import (
	"testing"

	"github.com/extractq/extractq/devtools/conformance"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.TestProviders(t, conformance.Targets, conformance.Cases)
}
