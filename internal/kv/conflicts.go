package kv

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
)

// WithConflicts is the simulation's twin of a contended engine: about one
// Update attempt in oneIn loses a race, as a transaction of another MDS
// process (etcd) or a concurrent one in the same process would make it.
// The losing attempt runs fn to its end and is rolled back, so whatever fn
// did outside its transaction shows up: Engine says fn may run more than
// once, and this is how the simulation holds every caller to it.
//
// Conflicts come from a generator seeded by seed. Which Update meets one
// depends on how goroutines interleave, so runs replay their faults only
// as far as their interleaving does.
func WithConflicts(e Engine, seed uint64, oneIn int) Engine {
	return &conflicting{Engine: e, rng: rand.New(rand.NewPCG(seed, 0xc0f1)), oneIn: max(oneIn, 1)}
}

type conflicting struct {
	Engine
	mu        sync.Mutex
	rng       *rand.Rand
	oneIn     int
	conflicts int
}

// errRolledBack rolls back an attempt chosen to lose its race.
var errRolledBack = errors.New("kv: attempt rolled back to inject a conflict")

func (e *conflicting) Update(ctx context.Context, fn func(Txn) error) error {
	return Retry(ctx, func() error {
		if !e.loses() {
			return e.Engine.Update(ctx, fn)
		}
		err := e.Engine.Update(ctx, func(t Txn) error {
			if err := fn(t); err != nil {
				return err
			}
			return errRolledBack
		})
		if err == nil || errors.Is(err, errRolledBack) {
			return ErrConflict
		}
		return err // fn failed on its own: as it would have without the race
	})
}

// loses draws whether the next attempt loses its race.
func (e *conflicting) loses() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rng.IntN(e.oneIn) != 0 {
		return false
	}
	e.conflicts++
	return true
}

// Conflicts reports how many conflicts e injected (0 for an engine not
// made by WithConflicts).
func Conflicts(e Engine) int {
	c, ok := e.(*conflicting)
	if !ok {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conflicts
}
