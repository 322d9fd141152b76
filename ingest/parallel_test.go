package ingest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store/storetest"
)

// TestRunParallel: with several lines at once, every message is published
// once, an id repeated in the file counts once, and bad lines keep their
// numbers, in order.
func TestRunParallel(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	q := queuetest.NewStream(t)
	var lines strings.Builder
	for i := range 200 {
		switch {
		case i%50 == 7:
			lines.WriteString("not json\n")
		case i%40 == 3:
			fmt.Fprintf(&lines, `{"id":"p-0","text":"another text %d"}`+"\n", i) // id p-0 again, other text
		default:
			fmt.Fprintf(&lines, `{"id":"p-%d","text":"message %d"}`+"\n", i, i)
		}
	}
	in, err := ingest.New(ingest.Config{Store: st, Publisher: queue.NewPublisher(q.JS, q.NATS), SchemaID: "customer_message",
		MaxTextBytes: 1000, Parallel: 8})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := in.Run(context.Background(), strings.NewReader(lines.String()))
	if err != nil {
		t.Fatal(err)
	}
	// Lines 8, 58, 108, 158 are bad. Six lines carry id p-0, each with its
	// own text: whichever is stored first, the other five are conflicts.
	if sum.Lines != 200 || sum.Rejected != 9 || sum.Published != 191 || sum.Duplicates != 0 {
		t.Fatalf("%+v", sum)
	}
	for i := 1; i < len(sum.Errors); i++ {
		if sum.Errors[i-1].Line > sum.Errors[i].Line {
			t.Fatalf("errors out of line order: %+v", sum.Errors)
		}
	}
	if got := q.Messages(t); got != 191 {
		t.Fatalf("stream holds %d, want 191", got)
	}

	// The same file again, in parallel: nothing is published.
	in2, _ := ingest.New(ingest.Config{Store: st, Publisher: queue.NewPublisher(q.JS, q.NATS), SchemaID: "customer_message",
		MaxTextBytes: 1000, Parallel: 8})
	again, err := in2.Run(context.Background(), strings.NewReader(lines.String()))
	if err != nil || again.Published != 0 || again.Duplicates != 191 || q.Messages(t) != 191 {
		t.Fatalf("%+v %v, stream %d", again, err, q.Messages(t))
	}
}

// TestRunByteOrderMark: a UTF-8 byte order mark before the first line is
// not data.
func TestRunByteOrderMark(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	q := queuetest.NewStream(t)
	in, err := ingest.New(ingest.Config{Store: st, Publisher: queue.NewPublisher(q.JS, q.NATS), SchemaID: "customer_message", MaxTextBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := in.Run(context.Background(), strings.NewReader("\xef\xbb\xbf{\"id\":\"b1\",\"text\":\"hello\"}\n{\"id\":\"b2\",\"text\":\"again\"}\n"))
	if err != nil || sum.Published != 2 || sum.Rejected != 0 {
		t.Fatalf("%+v %v", sum, err)
	}
}
