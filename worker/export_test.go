package worker

import (
	"context"

	"github.com/extractq/extractq/queue"
)

// SetTestHook makes h run first in every Handle of w; when it returns
// true, its decision is the delivery's. Set it before w handles anything.
func SetTestHook(w *Worker, h func(ctx context.Context, d *queue.Delivery) (queue.Decision, bool)) {
	w.testHook = h
}
