package pipeline

import "testing"

func TestGround(t *testing.T) {
	t.Parallel()
	s := loadTestSchema(t)
	cases := []struct {
		name  string
		text  string
		value string
		found bool
		span  [2]int
	}{
		{"Exact", "order 4821300017 please", "4821300017", true, [2]int{6, 16}},
		{"CaseAndSeparators", "my sku is AB-123 45.", "ab12345", true, [2]int{10, 19}},
		{"InsideLongerRun", "order 04821300017", "4821300017", false, [2]int{}},
		{"Invented", "no ids here", "4821300017", false, [2]int{}},
		{"CodePointOffsets", "😀é order 4821300017", "4821300017", true, [2]int{9, 19}},
		{"PhoneFormats", "call (720) 986-4183 now", "720-986-4183", true, [2]int{6, 19}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inst := map[string]any{"order_id": tc.value}
			errs, ev := s.Ground(inst, tc.text)
			if tc.found {
				if len(errs) != 0 || len(ev) != 1 {
					t.Fatalf("errs %v ev %v", errs, ev)
				}
				if ev[0].Start != tc.span[0] || ev[0].End != tc.span[1] {
					t.Fatalf("span %d-%d, want %v", ev[0].Start, ev[0].End, tc.span)
				}
				return
			}
			if len(errs) != 1 || errs[0].Kind != KindRule || errs[0].Keyword != "grounded" || errs[0].Path != "/order_id" {
				t.Fatalf("errs %v", errs)
			}
		})
	}

	t.Run("NestedAndNull", func(t *testing.T) {
		t.Parallel()
		inst := decode(t, `{"order_id":null,"items":[{"sku":"ab12345","qty":1},{"sku":"zz999","qty":1}]}`)
		errs, ev := s.Ground(inst, "sku AB-12345")
		if len(errs) != 1 || errs[0].Path != "/items/1/sku" {
			t.Fatalf("errs %v", errs)
		}
		if len(ev) != 1 || ev[0].Path != "/items/0/sku" {
			t.Fatalf("ev %v", ev)
		}
	})
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	if got := Normalize(" AB-123 45 "); got != "ab12345" {
		t.Fatalf("got %q", got)
	}
}
