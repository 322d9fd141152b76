package llmsim

import (
	"math/rand/v2"
	"testing"
)

// A repair line that names the value a field must take sets that value,
// not the honest one; a line naming no enum value is fixed as before.
func TestRepairFollowsInstruction(t *testing.T) {
	t.Parallel()
	d, err := parseSchema([]byte(`{"type":"object","required":["intent","flow"],"properties":{
	  "intent":{"type":"string","enum":["recover_password","manage_cancel"]},
	  "flow":{"type":["string","null"],"enum":["account_access","order_issue",null]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	f := &filler{d: d, re: &regexCache{}}
	prev := `{"intent":"recover_password","flow":"order_issue"}`
	honest := map[string]any{"intent": "recover_password", "flow": "order_issue"}
	for msg, want := range map[string]any{
		"flow must be account_access for intent recover_password": "account_access",
		"flow must be null for intent status_delivery_date":       nil,
		"flow must be shipping_issue for intent status":           nil, // not in the enum: the honest value, which equals it, becomes null
	} {
		c := conversation{repair: true, prev: prev, errs: []errorLine{{path: "/flow", message: msg}}}
		rr := f.repair(c, honest, 1, rand.New(rand.NewPCG(1, 2)))
		if got := rr.doc.(map[string]any)["flow"]; got != want {
			t.Errorf("%q: flow %v, want %v", msg, got, want)
		}
	}
}
