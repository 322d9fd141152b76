package erasure_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestEraseRefusesKeysNotUTF8: an id that is not UTF-8 names no stored
// message (ingest refuses such ids), so it must not erase the message
// whose id holds U+FFFD where its bad byte is: another customer's.
func TestEraseRefusesKeysNotUTF8(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	seed(t, st, "b-utf8", 0, []string{"caf\uFFFD", "m-1"}, nil)
	svc := erasure.New(st)
	for _, key := range []store.MessageKey{
		{Source: "mail", ExternalID: "caf\xe9"},
		{Source: "mail\xff", ExternalID: "m-1"},
	} {
		for _, dry := range []bool{true, false} {
			res, err := svc.Erase(t.Context(), erasure.Request{Keys: []store.MessageKey{{Source: "mail", ExternalID: "m-1"}, key},
				Actor: "dpo", Via: store.ViaCLI, DryRun: dry})
			ik, ok := errors.AsType[*erasure.InvalidKeyError](err)
			if !ok || ik.Key != key {
				t.Errorf("key %q (dry run %v): error %v, result %v; want an *InvalidKeyError naming it", key, dry, err, statuses(res))
			}
		}
	}
	if got := erased(t, st); len(got) != 0 {
		t.Fatalf("erased %q; want nothing erased when a key is not UTF-8", got)
	}
	// The message's own id erases it.
	res, err := svc.Erase(t.Context(), erasure.Request{Keys: []store.MessageKey{{Source: "mail", ExternalID: "caf\uFFFD"}},
		Actor: "dpo", Via: store.ViaCLI})
	if err != nil || !slices.Equal(erased(t, st), []string{"caf\uFFFD"}) {
		t.Fatalf("erasing caf\\uFFFD: %v %v; erased %q", statuses(res), err, erased(t, st))
	}
}
