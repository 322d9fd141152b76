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

// TestSegmentsAt: each segment's At is the code-point offset of its text
// in the stored text, which its text then follows character for
// character (a dropped CR ends a segment), with emoji (outside the BMP)
// and markers before it.
func TestSegmentsAt(t *testing.T) {
	t.Parallel()
	text := "🎉 a\u202Eb\r\nc 😀 Ann Lee\rx"
	runes := []rune(text)
	segs := Segments(text, []Span{{Path: "/full_name", Start: 11, End: 18}})
	for _, s := range segs {
		if s.Ctl != "" {
			if !isShownControl(runes[s.At]) {
				t.Errorf("marker %s at %d: %q is not a control", s.Ctl, s.At, runes[s.At])
			}
			continue
		}
		got := []rune(s.Text)
		if s.At+len(got) > len(runes) || string(runes[s.At:s.At+len(got)]) != s.Text {
			t.Errorf("segment %q at %d is not the stored text there", s.Text, s.At)
		}
		if s.Mark != "" && (s.At != 11 || s.Text != "Ann Lee") {
			t.Errorf("highlight %q at %d, want Ann Lee at 11", s.Text, s.At)
		}
	}
}
