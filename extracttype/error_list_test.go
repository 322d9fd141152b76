package extracttype_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/extractq/extractq/extracttype"
)

func TestError(t *testing.T) {
	t.Parallel()

	t.Run("ErrorShowsRootAsSlash", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			err  extracttype.Error
			want string
		}{
			{extracttype.Error{Kind: extracttype.KindParse, Message: "no JSON object"}, "/: no JSON object"},
			{extracttype.Error{Kind: extracttype.KindSchema, Path: "/order_id", Keyword: "required", Message: "missing"}, "/order_id: missing"},
		} {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("%+v.Error() = %q, want %q", tt.err, got, tt.want)
			}
		}
	})

	t.Run("PathPatternFoldsIndices", func(t *testing.T) {
		t.Parallel()
		for path, want := range map[string]string{
			"":                "",
			"/order_id":       "/order_id",
			"/items/3/sku":    "/items/*/sku",
			"/items/12":       "/items/*",
			"/items/0/1/2":    "/items/*/*/*",
			"/a/0/b/10/c":     "/a/*/b/*/c",
			"/sku1/2x/x2":     "/sku1/2x/x2", // not whole segments of digits
			"/items/-1/sku":   "/items/-1/sku",
			"/0":              "/*",
			"/items/3/sku/04": "/items/*/sku/*",
		} {
			e := extracttype.Error{Path: path}
			if got := e.PathPattern(); got != want {
				t.Errorf("PathPattern(%q) = %q, want %q", path, got, want)
			}
		}
	})

	t.Run("Errorf", func(t *testing.T) {
		t.Parallel()
		got := extracttype.Errorf(extracttype.KindRule, "/tracking_id", "grounded", "value not found in the message (%d chars)", 18)
		want := extracttype.Error{Kind: extracttype.KindRule, Path: "/tracking_id", Keyword: "grounded", Message: "value not found in the message (18 chars)"}
		if got != want {
			t.Fatalf("Errorf = %+v, want %+v", got, want)
		}
	})

	t.Run("JSONShape", func(t *testing.T) {
		t.Parallel()
		// The stored error lists, the triage API and the announcements all
		// carry this shape; keyword is left out when empty.
		l := extracttype.ErrorList{
			{Kind: extracttype.KindSchema, Path: "/amount", Keyword: "type", Message: "want number"},
			{Kind: extracttype.KindParse, Message: "no JSON object"},
		}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		const want = `[{"kind":"schema","path":"/amount","keyword":"type","message":"want number"},{"kind":"parse","path":"","message":"no JSON object"}]`
		if string(b) != want {
			t.Fatalf("json %s, want %s", b, want)
		}
		var back extracttype.ErrorList
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(back) != fmt.Sprint(l) {
			t.Fatalf("round trip %+v, want %+v", back, l)
		}
	})
}

func TestErrorList(t *testing.T) {
	t.Parallel()

	t.Run("ErrorJoinsLines", func(t *testing.T) {
		t.Parallel()
		l := extracttype.ErrorList{
			{Path: "/a", Message: "one"},
			{Message: "two"},
		}
		if got, want := l.Error(), "/a: one\n/: two"; got != want {
			t.Fatalf("Error() = %q, want %q", got, want)
		}
		if got := extracttype.ErrorList(nil).Error(); got != "" {
			t.Fatalf("empty list Error() = %q", got)
		}
	})

	t.Run("TravelsAsError", func(t *testing.T) {
		t.Parallel()
		l := extracttype.ErrorList{{Kind: extracttype.KindBudget, Keyword: "max_tokens", Message: "over budget"}}
		err := fmt.Errorf("extract message 7: %w", l)
		var got extracttype.ErrorList
		if !errors.As(err, &got) || len(got) != 1 || got[0].Kind != extracttype.KindBudget {
			t.Fatalf("errors.As(%v) = %+v", err, got)
		}
	})

	t.Run("SortByPathKindKeywordMessage", func(t *testing.T) {
		t.Parallel()
		l := extracttype.ErrorList{
			{Kind: extracttype.KindSchema, Path: "/b", Keyword: "type", Message: "m"},
			{Kind: extracttype.KindSchema, Path: "/a", Keyword: "type", Message: "z"},
			{Kind: extracttype.KindRule, Path: "/a", Keyword: "grounded", Message: "m"},
			{Kind: extracttype.KindSchema, Path: "/a", Keyword: "enum", Message: "m"},
			{Kind: extracttype.KindSchema, Path: "/a", Keyword: "type", Message: "a"},
			{Kind: extracttype.KindParse, Path: "", Message: "m"},
		}
		l.Sort()
		want := extracttype.ErrorList{
			{Kind: extracttype.KindParse, Path: "", Message: "m"},
			{Kind: extracttype.KindRule, Path: "/a", Keyword: "grounded", Message: "m"},
			{Kind: extracttype.KindSchema, Path: "/a", Keyword: "enum", Message: "m"},
			{Kind: extracttype.KindSchema, Path: "/a", Keyword: "type", Message: "a"},
			{Kind: extracttype.KindSchema, Path: "/a", Keyword: "type", Message: "z"},
			{Kind: extracttype.KindSchema, Path: "/b", Keyword: "type", Message: "m"},
		}
		if fmt.Sprint(l) != fmt.Sprint(want) {
			t.Fatalf("sorted\n%+v\nwant\n%+v", l, want)
		}
	})

	t.Run("Repairable", func(t *testing.T) {
		t.Parallel()
		schema := extracttype.Error{Kind: extracttype.KindSchema}
		rule := extracttype.Error{Kind: extracttype.KindRule}
		truncated := extracttype.Error{Kind: extracttype.KindTruncated}
		for _, tt := range []struct {
			name string
			l    extracttype.ErrorList
			want bool
		}{
			{"Empty", nil, false},
			{"AllRepairable", extracttype.ErrorList{schema, rule}, true},
			{"OneNot", extracttype.ErrorList{schema, truncated}, false},
		} {
			if got := tt.l.Repairable(); got != tt.want {
				t.Errorf("%s: Repairable() = %v, want %v", tt.name, got, tt.want)
			}
		}
	})
}

func TestKindRepairable(t *testing.T) {
	t.Parallel()
	// DESIGN.md "The extraction contract": parse, schema, rule and tool
	// failures get the one repair; the others fail the run at once.
	for k, want := range map[extracttype.Kind]bool{
		extracttype.KindParse:        true,
		extracttype.KindSchema:       true,
		extracttype.KindRule:         true,
		extracttype.KindTool:         true,
		extracttype.KindTruncated:    false,
		extracttype.KindRefusal:      false,
		extracttype.KindPatchInvalid: false,
		extracttype.KindBudget:       false,
		extracttype.KindInput:        false,
		extracttype.KindTransport:    false,
		extracttype.KindDelivery:     false,
		extracttype.Kind("unknown"):  false,
	} {
		if got := k.Repairable(); got != want {
			t.Errorf("%s.Repairable() = %v, want %v", k, got, want)
		}
	}
}
