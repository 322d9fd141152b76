package triage

import (
	"slices"
	"strings"
	"testing"
)

func TestSegments(t *testing.T) {
	t.Parallel()

	t.Run("ControlsBecomeMarkers", func(t *testing.T) {
		t.Parallel()
		segs := Segments("a\u202Eb\u200Bc\r\nd\re\x00f\u200Dg", nil)
		var text, ctl []string
		for _, s := range segs {
			text = append(text, s.Text)
			ctl = append(ctl, s.Ctl)
		}
		if got := strings.Join(text, ""); got != "abc\ndef\u200Dg" {
			t.Errorf("text = %q", got)
		}
		want := []string{"RLO", "ZWSP", "CR", "NUL"}
		var got []string
		for _, c := range ctl {
			if c != "" {
				got = append(got, c)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("markers = %q, want %q (a CR before LF is dropped, ZWJ kept)", got, want)
		}
	})

	t.Run("HighlightsByCodePoint", func(t *testing.T) {
		t.Parallel()
		// "é" and the emoji are one code point each, several bytes.
		text := "é order 12345 😀 for Ann Lee"
		segs := Segments(text, []Span{
			{Path: "/order_id", Start: 8, End: 13},
			{Path: "/full_name", Start: 20, End: 27, Failing: true},
			{Path: "/first", Start: 20, End: 23},
			{Path: "/out", Start: 90, End: 99},
		})
		var marked []string
		for _, s := range segs {
			if s.Mark != "" {
				marked = append(marked, s.Mark+":"+s.Text+":"+strings.Join(s.Paths, ","))
			}
		}
		want := []string{"found:12345:/order_id", "failing:Ann:/full_name,/first", "failing: Lee:/full_name"}
		if !slices.Equal(marked, want) {
			t.Errorf("marked = %q, want %q", marked, want)
		}
		if segs[1].Anchor == "" {
			t.Error("first highlight has no anchor")
		}
		var all strings.Builder
		for _, s := range segs {
			all.WriteString(s.Text)
		}
		if all.String() != text {
			t.Errorf("text changed: %q", all.String())
		}
	})

	t.Run("Visible", func(t *testing.T) {
		t.Parallel()
		if got := Visible("id\u202E42"); got != "id⟨RLO⟩42" {
			t.Errorf("Visible = %q", got)
		}
		if got := Visible("plain مرحبا"); got != "plain مرحبا" {
			t.Errorf("Visible changed plain text: %q", got)
		}
		if !HasRTL("abc مرحبا") || HasRTL("abc") {
			t.Error("HasRTL")
		}
	})
}

func TestLineDiff(t *testing.T) {
	t.Parallel()
	d := LineDiff("a\nb\nc", "a\nx\nc\nd")
	var got []string
	for _, l := range d {
		got = append(got, l.Op+l.Text)
	}
	want := []string{" a", "-b", "+x", " c", "+d"}
	if !slices.Equal(got, want) {
		t.Errorf("diff = %q, want %q", got, want)
	}
	if LineDiff(strings.Repeat("x\n", maxDiffLines+1), "x") != nil {
		t.Error("a too long text was diffed")
	}
}
