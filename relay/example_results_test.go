package relay_test

import (
	"fmt"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/relay"
)

// The subject of a message's events on the results stream, from its
// source and id as ingested (docs/results-stream.md, "Subjects"); the
// same key as the shell's
//
//	printf '%s\0%s' mail 'T-1042 *' | sha256sum | cut -c1-32
func ExampleMessageKey() {
	key := relay.MessageKey("mail", "T-1042 *")
	fmt.Println(config.Default().NATS.ResultsSubject("customer_message", key))
	// Output: extractq.results.customer_message.ea14931ec243b8b132e85e4b4f76cc12
}
