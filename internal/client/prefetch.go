package client

import (
	"context"
	"sync"

	"github.com/braidfs/braid/internal/wire"
)

// Sequential prefetch (Panasas' read-ahead that grows on sequential
// streams). A reader going through a file in order — through FUSE that is
// 128 KiB at a time — would otherwise wait a round trip to the OSDs for
// every request. Once reads are seen to follow each other, the handle
// reads ahead in windows that start at minPrefetch and double up to
// maxPrefetch, several in flight, and serves later reads from them. A read
// elsewhere drops the windows and starts small again.

const (
	minPrefetch        = 64 << 10
	maxPrefetch        = 8 << 20
	maxPrefetchedBytes = 32 << 20 // bytes one handle holds read ahead
)

type prefetchChunk struct {
	off  int64
	buf  []byte // pooled
	err  error
	done chan struct{}
	// refs counts readers copying out of the chunk and dropped says the
	// prefetcher has let go of it (both guarded by prefetcher.mu); the
	// buffer returns to the pool when both allow.
	refs    int
	dropped bool
}

type prefetcher struct {
	mu     sync.Mutex
	next   int64 // where a sequential reader reads next
	window int64
	chunks []*prefetchChunk // ascending, contiguous from chunks[0].off
}

// dropLocked forgets every window.
func (p *prefetcher) dropLocked() {
	for _, c := range p.chunks {
		p.releaseLocked(c, false)
	}
	p.chunks = nil
}

// releaseLocked drops the prefetcher's hold on c (reader false) or one
// reader's, and recycles the buffer once nobody holds it and its read is
// over.
func (p *prefetcher) releaseLocked(c *prefetchChunk, reader bool) {
	if reader {
		c.refs--
	} else {
		c.dropped = true
	}
	if c.dropped && c.refs == 0 {
		go func() { <-c.done; wire.PutBuf(c.buf) }()
	}
}

func (p *prefetcher) invalidate() {
	p.mu.Lock()
	p.dropLocked()
	p.window = 0
	p.mu.Unlock()
}

// prefetchRead fills dst from off (all of it below size) from read-ahead
// windows. It reports false when the access is not sequential; the caller
// then reads directly.
func (f *File) prefetchRead(dst []byte, off, size int64) (bool, error) {
	p := &f.pf
	p.mu.Lock()
	// The kernel has several reads of a stream in flight and they may
	// arrive out of order: anything near where the stream is counts.
	near := off == p.next || p.window > 0 && off+p.window >= p.next && off <= p.next+p.window
	if !near {
		p.dropLocked()
		p.window = 0
		p.next = off + int64(len(dst))
		p.mu.Unlock()
		return false, nil
	}
	p.next = max(p.next, off+int64(len(dst)))
	p.window = min(max(2*p.window, minPrefetch), maxPrefetch)
	// Drop windows the stream has left well behind, then keep the window
	// ahead of it in flight.
	for len(p.chunks) > 0 && p.chunks[0].off+int64(len(p.chunks[0].buf))+p.window <= off {
		p.releaseLocked(p.chunks[0], false)
		p.chunks = p.chunks[1:]
	}
	end := off
	if len(p.chunks) > 0 && p.chunks[0].off <= off {
		end = p.chunks[len(p.chunks)-1].off + int64(len(p.chunks[len(p.chunks)-1].buf))
	} else {
		p.dropLocked()
	}
	held := int64(0)
	for _, c := range p.chunks {
		held += int64(len(c.buf))
	}
	want := min(p.next+p.window, size)
	for end < want && held < maxPrefetchedBytes {
		n := min(p.window, want-end, maxPrefetchedBytes-held)
		c := &prefetchChunk{off: end, buf: wire.GetBuf(int(n)), done: make(chan struct{})}
		go func() {
			defer close(c.done)
			c.err = f.readRange(context.Background(), c.buf, c.off)
		}()
		p.chunks = append(p.chunks, c)
		end += n
		held += n
	}
	chunks := append([]*prefetchChunk(nil), p.chunks...)
	for _, c := range chunks {
		c.refs++
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		for _, c := range chunks {
			p.releaseLocked(c, true)
		}
		p.mu.Unlock()
	}()
	// Copy what the windows hold; anything they do not cover is read here.
	filled := int64(0)
	for _, c := range chunks {
		if filled == int64(len(dst)) {
			break
		}
		pos := off + filled
		if pos < c.off || pos >= c.off+int64(len(c.buf)) {
			continue
		}
		<-c.done
		if c.err != nil {
			return true, f.readRange(context.Background(), dst[filled:], pos)
		}
		filled += int64(copy(dst[filled:], c.buf[pos-c.off:]))
	}
	if filled < int64(len(dst)) {
		return true, f.readRange(context.Background(), dst[filled:], off+filled)
	}
	return true, nil
}
