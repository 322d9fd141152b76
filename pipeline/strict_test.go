package pipeline

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extractq/extractq/extracttype"
)

func loadReturnSchema(t testing.TB) *Schema {
	t.Helper()
	raw, err := os.ReadFile("../schemas/return_request.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := CompileSchema("return_request", raw)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkStrictValid walks a converted schema and reports every place that
// breaks OpenAI's strict subset: an object without additionalProperties
// false or whose required is not all its properties, a keyword outside
// the subset, a format it does not know.
func checkStrictValid(t *testing.T, v any, path string) {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k := range m {
		if !strictKeywords[k] {
			t.Errorf("%s: keyword %s is not in the strict subset", path, k)
		}
	}
	if f, ok := m["format"].(string); ok && !strictFormats[f] {
		t.Errorf("%s: format %s", path, f)
	}
	if props, ok := m["properties"].(map[string]any); ok || isObjectType(m) {
		if m["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties %v, want false", path, m["additionalProperties"])
		}
		var names, req []string
		for n := range props {
			names = append(names, n)
		}
		for _, r := range m["required"].([]any) {
			req = append(req, r.(string))
		}
		slices.Sort(names)
		slices.Sort(req)
		if !slices.Equal(names, req) {
			t.Errorf("%s: required %v, properties %v", path, req, names)
		}
		for n, p := range props {
			checkStrictValid(t, p, path+"/properties/"+n)
		}
	}
	checkStrictValid(t, m["items"], path+"/items")
	if arr, ok := m["anyOf"].([]any); ok {
		for _, b := range arr {
			checkStrictValid(t, b, path+"/anyOf")
		}
	}
}

func TestStrictSchema(t *testing.T) {
	t.Parallel()

	t.Run("ReturnRequestIsStrictValid", func(t *testing.T) {
		t.Parallel()
		s := loadReturnSchema(t)
		var m map[string]any
		if err := json.Unmarshal(s.ModelSchema(), &m); err != nil {
			t.Fatal(err)
		}
		before := string(s.ModelSchema())
		conv, dropped, added := StrictSchema(m)
		checkStrictValid(t, conv, "")
		if string(s.ModelSchema()) != before {
			t.Fatal("StrictSchema changed its input")
		}
		if added {
			t.Error("return_request requires every property; nothing should be made nullable")
		}
		var got []string
		for _, d := range dropped {
			got = append(got, d.String())
		}
		want := []string{
			"maxLength at /properties/customer/properties/email",
			"maxLength at /properties/customer/properties/full_name",
			"minLength at /properties/customer/properties/full_name",
			"maxLength at /properties/shipping/properties/city",
			"minLength at /properties/shipping/properties/city",
			"maxLength at /properties/shipping/properties/street_address",
			"minLength at /properties/shipping/properties/street_address",
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("dropped\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		// What the subset has is kept.
		b, _ := json.Marshal(conv)
		for _, kw := range []string{`"pattern"`, `"format":"email"`, `"format":"date"`, `"maxItems":20`, `"minimum":1`, `"enum"`} {
			if !strings.Contains(string(b), kw) {
				t.Errorf("strict schema lost %s", kw)
			}
		}
	})

	t.Run("OptionalBecomesNullable", func(t *testing.T) {
		t.Parallel()
		var m map[string]any
		json.Unmarshal([]byte(`{"type":"object","required":["a"],"properties":{
			"a":{"type":"string","minLength":2},
			"b":{"type":"string","enum":["x","y"]},
			"c":{"$ref":"#/$defs/c"},
			"d":{"type":["integer","null"]},
			"e":{"type":"object","properties":{"f":{"type":"boolean"}},"additionalProperties":true},
			"g":{"oneOf":[{"type":"string"},{"type":"integer"}]}},
			"$defs":{"c":{"type":"integer","uniqueItems":true}}}`), &m)
		conv, dropped, added := StrictSchema(m)
		checkStrictValid(t, conv, "")
		if !added {
			t.Fatal("no property made nullable")
		}
		props := conv["properties"].(map[string]any)
		for name, want := range map[string]string{
			"b": `{"enum":["x","y",null],"type":["string","null"]}`,
			"c": `{"anyOf":[{"$ref":"#/$defs/c"},{"type":"null"}]}`,
			"d": `{"type":["integer","null"]}`,
		} {
			if got := mustJSON(t, props[name]); got != want {
				t.Errorf("%s: %s, want %s", name, got, want)
			}
		}
		var got []string
		for _, d := range dropped {
			got = append(got, d.String())
		}
		want := []string{"uniqueItems at /$defs/c", "minLength at /properties/a",
			"additionalProperties at /properties/e", "oneOf at /properties/g"}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("dropped %v, want %v", got, want)
		}

		// A strict reply writes the optional fields as null; the full
		// schema reads that as their absence.
		inst := decode(t, `{"a":"qq","b":null,"c":null,"d":null,"e":{"f":null},"g":null}`)
		dropAddedNulls(m, m, inst, 0)
		if got := mustJSON(t, inst); got != `{"a":"qq","d":null,"e":{}}` {
			t.Fatalf("after dropAddedNulls %s", got)
		}
	})
}

// TestStrictModeOpenAI: under provider openai the record schema is sent
// strict, in the subset, and a keyword the subset lacks (maxLength) is
// still enforced by the validator: a reply the server let through because
// it never saw maxLength fails with kind schema and is repaired.
func TestStrictModeOpenAI(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("Abcdefghij", 10) + "k" // 101 letters: maxLength is 100
	text := "Hello, I am " + long + " and I want to return an item."
	record := func(name string) string {
		return `{"intent":"other","customer":{"full_name":` + name + `,"email":null,"account_id":null,"username":null,"phone":null},` +
			`"order":{"order_id":null,"purchase_date":null,"membership_level":null},"items":[],` +
			`"refund":{"amount":null,"method":null},"shipping":{"street_address":null,"city":null,"state":null,"zip_code":null}}`
	}
	for _, mode := range []string{ModeResponseFormat, ModeTools} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv, url := newEnforcing(t, []string{record(`"` + long + `"`)}, []string{record("null")})
			cfg := openai.DefaultConfig("k")
			cfg.BaseURL = url
			prompt, err := LoadPrompt("extract.v1")
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.InfoLevel)
			ext := NewExtractor(openai.NewClientWithConfig(cfg), ExtractorConfig{
				Model: "m", Provider: ProviderOpenAI, RequestMode: mode, MaxCompletionTokens: 512, ContextWindowTokens: 32768,
				Budget: Budget{MaxTokens: 30000, MaxCostUSD: 1}, Logger: zap.New(core),
			})
			schema := loadReturnSchema(t)
			ext.Prepare(schema)
			ext.Prepare(schema)
			entries := logs.FilterMessageSnippet("strict subset").All()
			if len(entries) != 1 || !strings.Contains(entries[0].ContextMap()["dropped"].(string), "maxLength at /properties/customer/properties/full_name") {
				t.Fatalf("start-up log %+v, want one line naming the dropped keywords", entries)
			}
			res, err := ext.Process(context.Background(), Input{Text: text, Schema: schema, Prompt: prompt, Repair: RepairRegenerate})
			if err != nil {
				t.Fatal(err)
			}
			req := wire(t, srv.requests[0])
			strict := dig(req, "response_format", "json_schema", "strict")
			if mode == ModeTools {
				strict = dig(req["tools"].([]any)[0], "function", "strict")
			}
			if strict != true {
				t.Fatalf("strict %v, want true", strict)
			}
			if strings.Contains(string(srv.schemas[0]), "maxLength") || strings.Contains(string(srv.schemas[0]), "minLength") {
				t.Fatalf("sent schema holds a keyword the subset lacks: %s", srv.schemas[0])
			}
			errs := res.Calls[0].Errors
			if len(errs) != 1 || errs[0].Kind != extracttype.KindSchema || errs[0].Keyword != "maxLength" || errs[0].Path != "/customer/full_name" {
				t.Fatalf("first call errors %v, want one maxLength schema error", errs)
			}
			if res.Outcome != OutcomeRepaired {
				t.Fatalf("outcome %s %v", res.Outcome, res.Errors)
			}
		})
	}
}
