package kv

import "sync"

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
func (c *committer) run(fn func(Txn) error) error {
	p := &pendingUpdate{fn: fn, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	if c.committing {
		c.mu.Unlock()
		<-p.done
		return p.err
	}
	c.committing = true
	for len(c.queue) > 0 {
		n := min(len(c.queue), maxGroup)
		batch := c.queue[:n:n]
		c.queue = c.queue[n:]
		c.mu.Unlock()
		c.commit(batch)
		c.mu.Lock()
	}
	c.committing = false
	c.mu.Unlock()
	<-p.done
	return p.err
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
