package repairworker

import (
	"context"
	"log/slog"
	"time"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/client"
	"github.com/braidfs/braid/internal/wire"
)

// As returns how an MDS process runs its own repair workers: it serves
// the repair queue of the MDS at addr with workers workers until ctx
// ends, reconnecting if the MDS is briefly unreachable, over the network
// nw (nil: TCP) as the principal of cred (nil: none, for an open MDS);
// process names the MDS process they run in (Options.Process).
func As(nw wire.Network, cred *auth.Credential) func(ctx context.Context, log *slog.Logger, addr, process string, workers int) {
	return func(ctx context.Context, log *slog.Logger, addr, process string, workers int) {
		run(ctx, log, addr, process, workers, nw, cred)
	}
}

func run(ctx context.Context, log *slog.Logger, addr, process string, workers int, nw wire.Network, cred *auth.Credential) {
	opts := client.DefaultOptions
	opts.Network = nw
	opts.Credential = cred
	for ctx.Err() == nil {
		c, err := client.DialOptions(ctx, addr, opts)
		if err != nil {
			log.Debug("repair worker: connect to MDS", "addr", addr, "err", err)
			client.Pause(ctx, time.Second)
			continue
		}
		_ = Serve(ctx, c, Options{Workers: workers, Name: "mds-healer", Process: process})
		c.Close()
	}
}
