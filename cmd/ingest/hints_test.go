package main

import "testing"

func TestLineListAndIconvHint(t *testing.T) {
	t.Parallel()
	lists := []struct {
		n     int
		lines []int
		want  string
	}{
		{1, []int{7}, "line 7"},
		{3, []int{2, 5, 9}, "lines 2, 5, 9"},
		{17, []int{1, 2, 3, 4, 5}, "lines 1, 2, 3, 4, 5 and 12 more"},
	}
	for _, tt := range lists {
		if got := lineList(tt.n, tt.lines); got != tt.want {
			t.Errorf("lineList(%d, %v) = %q, want %q", tt.n, tt.lines, got, tt.want)
		}
	}
	hints := []struct{ file, want string }{
		{"-", "iconv -f latin1 -t utf-8"},
		{"data/export.csv", "iconv -f latin1 -t utf-8 data/export.csv > data/export.utf8.csv"},
		{"msgs", "iconv -f latin1 -t utf-8 msgs > msgs.utf8"},
		{"it's here.jsonl", `iconv -f latin1 -t utf-8 'it'\''s here.jsonl' > 'it'\''s here.utf8.jsonl'`},
		{"$(rm x).csv", `iconv -f latin1 -t utf-8 '$(rm x).csv' > '$(rm x).utf8.csv'`},
	}
	for _, tt := range hints {
		if got := iconvHint(tt.file); got != tt.want {
			t.Errorf("iconvHint(%q) = %q, want %q", tt.file, got, tt.want)
		}
	}
}
