// Package healer runs braid's repair workers (the client library's Heal)
// inside another process, so the MDS can start them without depending on
// the client library itself.
package healer

import (
	"context"
	"log/slog"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/wire"
)

// Run serves the repair queue of the MDS at addr with workers workers
// until ctx ends, reconnecting if the MDS is briefly unreachable; process
// names the MDS process they run in (braid.HealOptions.Process).
func Run(ctx context.Context, log *slog.Logger, addr, process string, workers int) {
	run(ctx, log, addr, process, workers, nil, nil)
}

// Over is Run on the network nw (the simulation's).
func Over(nw wire.Network) func(ctx context.Context, log *slog.Logger, addr, process string, workers int) {
	return As(nw, nil)
}

// As is Run on the network nw as the principal of cred (nil: none, for
// an open MDS).
func As(nw wire.Network, cred *auth.Credential) func(ctx context.Context, log *slog.Logger, addr, process string, workers int) {
	return func(ctx context.Context, log *slog.Logger, addr, process string, workers int) {
		run(ctx, log, addr, process, workers, nw, cred)
	}
}

func run(ctx context.Context, log *slog.Logger, addr, process string, workers int, nw wire.Network, cred *auth.Credential) {
	opts := braid.DefaultOptions
	opts.Network = nw
	opts.Credential = cred
	for ctx.Err() == nil {
		c, err := braid.DialOptions(ctx, addr, opts)
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
		_ = c.Heal(ctx, braid.HealOptions{Workers: workers, Name: "mds-healer", Process: process})
		c.Close()
	}
}
