package braid

import (
	"context"
	"sync"
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
	buf  []byte
	err  error
	done chan struct{}
}

type prefetcher struct {
	mu     sync.Mutex
	next   int64 // where a sequential reader reads next
	window int64
	chunks []*prefetchChunk // ascending, contiguous from chunks[0].off
}

// dropLocked forgets every window. Their buffers are not pooled: a
// reader may still be copying out of a window another read has dropped,
// so they are left to the garbage collector.
func (p *prefetcher) dropLocked() {
	p.chunks = nil
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
		c := &prefetchChunk{off: end, buf: make([]byte, n), done: make(chan struct{})}
		go func() {
			defer close(c.done)
			c.err = f.readRange(context.Background(), c.buf, c.off)
		}()
		p.chunks = append(p.chunks, c)
		end += n
		held += n
	}
	chunks := append([]*prefetchChunk(nil), p.chunks...)
	p.mu.Unlock()
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
