package client

import (
	"context"
	"time"
)

// Pause waits d or until ctx ends, whichever is first: the wait between
// retries of a request that may succeed later.
func Pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
