// Package healer runs braid's repair workers (the client library's Heal)
// inside another process, so the MDS can start them without depending on
// the client library itself.
package healer

import (
	"context"
	"log/slog"
	"time"

	"github.com/braidfs/braid"
)

// Run serves the repair queue of the MDS at addr with workers workers
// until ctx ends, reconnecting if the MDS is briefly unreachable.
func Run(ctx context.Context, log *slog.Logger, addr string, workers int) {
	for ctx.Err() == nil {
		c, err := braid.Dial(ctx, addr)
		if err != nil {
			log.Debug("healer: connect to MDS", "addr", addr, "err", err)
			t := time.NewTimer(time.Second)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		_ = c.Heal(ctx, braid.HealOptions{Workers: workers, Name: "mds-healer"})
		c.Close()
	}
}
