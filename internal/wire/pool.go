package wire

import (
	"math/bits"
	"sync"
)

// Buffer pools by power-of-two size class, 4 KiB .. MaxDataBytes. Bulk
// buffers are recycled so the data path does not allocate per request.
const minPoolShift = 12

var pools [25 - minPoolShift + 1]sync.Pool // classes 4KiB..16MiB (1<<24), plus headroom

func class(n int) int {
	if n <= 1<<minPoolShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minPoolShift
}

// GetBuf returns a buffer of length n from the pool.
func GetBuf(n int) []byte {
	c := class(n)
	if c >= len(pools) {
		return make([]byte, n)
	}
	if p, ok := pools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<(c+minPoolShift))
}

// PutBuf returns a buffer obtained from GetBuf to the pool.
func PutBuf(b []byte) {
	c := class(cap(b))
	if c >= len(pools) || cap(b) != 1<<(c+minPoolShift) {
		return
	}
	b = b[:cap(b)]
	pools[c].Put(&b)
}
