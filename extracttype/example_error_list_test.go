package extracttype_test

import (
	"fmt"

	"github.com/extractq/extractq/extracttype"
)

// An error list as the validator returns it: sorted, shown one line per
// error (the repair prompt's format) and folded for analytics.
func ExampleErrorList() {
	errs := extracttype.ErrorList{
		extracttype.Errorf(extracttype.KindSchema, "/items/2/qty", "minimum", "must be at least %d", 1),
		extracttype.Errorf(extracttype.KindRule, "/order_id", "grounded", "not found in the message"),
	}
	errs.Sort()
	fmt.Println(errs.Error())
	fmt.Println(errs[0].PathPattern(), errs.Repairable())
	// Output:
	// /items/2/qty: must be at least 1
	// /order_id: not found in the message
	// /items/*/qty true
}
