package queue_test

import (
	"context"
	"testing"

	"github.com/extractq/extractq/queue"
)

func TestStreamFullRefusesAndKeeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	cfg := h.cfg
	cfg.MaxMsgs = 2
	if _, err := queue.EnsureStream(ctx, h.js, cfg); err != nil {
		t.Fatal(err)
	}
	p := queue.NewPublisher(h.js, cfg)
	p.MaxRetries = 0
	for i := 1; i <= 2; i++ {
		if _, err := p.Publish(ctx, "d"+string(rune('0'+i)), queue.Envelope{MessageID: int64(i), RunNo: 1, SchemaID: "s"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := p.Publish(ctx, "d3", queue.Envelope{MessageID: 3, RunNo: 1, SchemaID: "s"})
	if !queue.IsStreamFull(err) {
		t.Fatalf("third publish: %v, want a stream-full error", err)
	}
	s, err := h.js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || info.State.FirstSeq != 1 {
		t.Fatalf("stream state %+v: the stored runs must be kept", info.State)
	}
}
