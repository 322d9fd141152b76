package llmsim

import (
	"errors"
	"testing"
)

func TestClearingCache(t *testing.T) {
	c := clearingCache[int]{max: 2}
	calls := 0
	f := func(s string) (int, error) {
		calls++
		if s == "bad" {
			return 0, errors.New("bad")
		}
		return len(s), nil
	}
	for _, k := range []string{"a", "bb", "a", "bb"} {
		if v, err := c.get(k, f); err != nil || v != len(k) {
			t.Fatalf("get(%q) = %d, %v", k, v, err)
		}
	}
	if calls != 2 {
		t.Errorf("computed %d times, want 2 (the repeats come from the cache)", calls)
	}
	if _, err := c.get("bad", f); err == nil {
		t.Error("error not returned")
	}
	if _, err := c.get("bad", f); err == nil || calls != 4 {
		t.Errorf("a failed value was kept (calls %d)", calls)
	}
	c.get("ccc", f) // the third entry empties the cache
	c.get("a", f)
	if calls != 6 {
		t.Errorf("computed %d times, want 6: a full cache starts again", calls)
	}
}
