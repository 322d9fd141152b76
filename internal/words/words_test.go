package words

import "testing"

func TestWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ got, want string }{
		{Plural(1, "line", "lines"), "1 line"},
		{Plural(0, "line", "lines"), "0 lines"},
		{Plural(3, "request", "requests"), "3 requests"},
		{Optional("; %s", ""), ""},
		{Optional("; %s", "hint"), "; hint"},
		{AllLinesWere(1), "the one line was"},
		{AllLinesWere(4), "every one of the 4 lines was"},
		{ShellQuote("data.csv"), "data.csv"},
		{ShellQuote("my file.csv"), "'my file.csv'"},
		{ShellQuote("it's"), `'it'\''s'`},
		{ShellQuote(""), "''"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
