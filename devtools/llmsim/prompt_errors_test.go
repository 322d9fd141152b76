package llmsim

import (
	"testing"

	"github.com/extractq/extractq/config"
)

// Value errors are tied to the phrase, deterministic per message, nested
// in rate, and never of the wrong shape: null where allowed, else another
// enum value.
func TestValueErrors(t *testing.T) {
	entries := []config.SimPromptErrors{{Match: "be careful", ValueErrorRate: 0.5}}
	if r := promptErrorRate(entries, "You extract.\n- be careful"); r != 0.5 {
		t.Errorf("rate with the phrase = %v, want 0.5", r)
	}
	if r := promptErrorRate(entries, "You extract."); r != 0 {
		t.Errorf("rate without the phrase = %v, want 0", r)
	}
	sd, err := parseSchema([]byte(`{"type":"object","properties":{
		"a":{"type":["string","null"]},"b":{"type":["string","null"]},"c":{"type":["string","null"]},"d":{"type":["string","null"]},
		"intent":{"type":"string","enum":["x","y","z"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	f := &filler{d: sd}
	honest := map[string]any{"a": "1", "b": "2", "c": "3", "d": "4", "intent": "x"}
	var hitLow, hitHigh int
	for _, text := range []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"} {
		low := f.valueErrors(honest, text, 1, 0.3).(map[string]any)
		again := f.valueErrors(honest, text, 1, 0.3).(map[string]any)
		high := f.valueErrors(honest, text, 1, 0.8).(map[string]any)
		for k, v := range low {
			if again[k] != v {
				t.Errorf("%s %s: %v then %v, want the same", text, k, v, again[k])
			}
			if v != honest[k] {
				hitLow++
				if high[k] == honest[k] {
					t.Errorf("%s %s: hit at 0.3, not at 0.8", text, k)
				}
			}
			if high[k] != honest[k] {
				hitHigh++
			}
		}
		if iv := high["intent"]; iv != "x" && iv != "y" {
			t.Errorf("%s: intent %v, want x or the next enum value y", text, iv)
		}
		if honest["a"] != "1" {
			t.Fatal("valueErrors changed its input")
		}
	}
	if hitLow == 0 || hitHigh <= hitLow || hitHigh == 40 {
		t.Errorf("hits: %d at 0.3, %d at 0.8 of 40 values: want some, more at the higher rate, not all", hitLow, hitHigh)
	}
}
