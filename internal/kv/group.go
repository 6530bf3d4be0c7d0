package kv

import (
	"errors"
	"fmt"
	"sync"
)

// committer group-commits updates without waiting: the first caller
// commits at once, and callers that arrive meanwhile share the next
// commit (a lone client pays one commit per update, not a batching delay).
type committer struct {
	// apply runs fns in one transaction of the engine. If one fails, it
	// rolls the transaction back and returns that fn's index and error;
	// otherwise it commits and returns -1 and the commit's error.
	apply func(fns []func(Txn) error) (failed int, err error)

	mu         sync.Mutex
	queue      []*pendingUpdate // waiting for the next commit
	committing bool
}

type pendingUpdate struct {
	fn   func(Txn) error
	err  error
	done chan struct{}
}

// maxGroup bounds the updates one commit carries.
const maxGroup = 256

// run runs fn in the next commit, leading the commit if none is running.
// A panic in fn is raised again here, in fn's caller, not in the leader's.
func (c *committer) run(fn func(Txn) error) error {
	p := &pendingUpdate{fn: safely(fn), done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	if !c.committing {
		c.committing = true
		c.lead()
	}
	c.mu.Unlock()
	<-p.done
	var pe *fnPanic
	if errors.As(p.err, &pe) {
		panic(pe.value)
	}
	return p.err
}

// lead commits the queue until it is empty; c.mu is held on entry and
// on return.
func (c *committer) lead() {
	for len(c.queue) > 0 {
		n := min(len(c.queue), maxGroup)
		batch := c.queue[:n:n]
		c.queue = c.queue[n:]
		c.mu.Unlock()
		c.commit(batch)
		c.mu.Lock()
	}
	c.committing = false
}

// fnPanic carries a panic of an update's fn to its caller.
type fnPanic struct{ value any }

func (p *fnPanic) Error() string { return fmt.Sprintf("update panicked: %v", p.value) }

// safely turns a panic of fn into an error, so that the group it was in
// commits without it and the committer goes on serving.
func safely(fn func(Txn) error) func(Txn) error {
	return func(t Txn) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = &fnPanic{value: v}
			}
		}()
		return fn(t)
	}
}

// commit applies batch in one transaction. An update that fails is taken
// out, the rest committed without it, and it is run alone so its error
// reflects the state it would have seen on its own (as bbolt's Batch).
func (c *committer) commit(batch []*pendingUpdate) {
	fns := make([]func(Txn) error, len(batch))
	for len(batch) > 0 {
		fns = fns[:0]
		for _, p := range batch {
			fns = append(fns, p.fn)
		}
		failed, err := c.apply(fns)
		if failed < 0 {
			for _, p := range batch {
				p.err = err
				close(p.done)
			}
			return
		}
		p := batch[failed]
		batch = append(batch[:failed:failed], batch[failed+1:]...)
		_, p.err = c.apply(fns[failed : failed+1])
		close(p.done)
	}
}
