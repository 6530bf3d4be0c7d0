package client

import "sync"

// pendingStripes tracks the stripe writes a file has in flight. A stripe
// is never sent while an earlier write of the same stripe is still in
// flight: OSDs apply requests concurrently, so two writes of one unit could
// land in either order and leave data and parity from different versions.
type pendingStripes struct {
	mu       sync.Mutex
	cond     *sync.Cond
	total    int
	byStripe map[int64]int
}

func newPendingStripes() *pendingStripes {
	p := &pendingStripes{byStripe: map[int64]int{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// begin waits until stripe fs has no write in flight, then counts one.
func (p *pendingStripes) begin(fs int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.byStripe[fs] > 0 {
		p.cond.Wait()
	}
	p.byStripe[fs]++
	p.total++
}

func (p *pendingStripes) end(fs int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byStripe[fs]--; p.byStripe[fs] == 0 {
		delete(p.byStripe, fs)
	}
	p.total--
	p.cond.Broadcast()
}

// waitStripe blocks until stripe fs has no write in flight.
func (p *pendingStripes) waitStripe(fs int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.byStripe[fs] > 0 {
		p.cond.Wait()
	}
}

// wait blocks until no stripe write is in flight. Unlike a WaitGroup it
// may run concurrently with begin.
func (p *pendingStripes) wait() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.total > 0 {
		p.cond.Wait()
	}
}
