package mds

import (
	"fmt"
	"hash/fnv"

	"github.com/braidfs/braid/internal/mdsproto"
)

// Slots: the logical servers of Slice's directory service. Every inode
// number carries its slot in its low slotBits bits, so whoever holds an
// inode number (a client, another MDS) knows its slot with no lookup,
// and several MDS processes can split the namespace by slot (a routing
// table maps slots to processes). A file, symlink or special node is
// born in its directory's slot, so the operations on a directory and on
// the files in it stay with one owner (a remove is one owner's change
// unless links or renames moved the file). A new directory stays in its
// parent's slot too, except with probability Config.MkdirSwitch, when it
// goes to a slot chosen by hashing its parent and name (Slice's mkdir
// switching, with its hashing of names): that is what spreads a tree over
// the processes. Inode numbers made before slots keep their low bits,
// which are as good a slot as any.
//
// The counter and ranges (inorange.go) count the high bits: number n of
// a range becomes inode n<<slotBits | slot. A counter that gave plain
// inode numbers before slots is above all of them, so n<<slotBits is too.
const (
	slotBits  = mdsproto.SlotBits
	slotCount = 1 << slotBits
	slotMask  = slotCount - 1
	// maxInoHigh bounds the counter: past it, n<<slotBits would wrap.
	maxInoHigh = 1<<(64-slotBits) - 1
)

// slotOf is the slot inode ino belongs to.
func slotOf(ino uint64) uint32 { return uint32(ino & slotMask) }

// inoInSlot is the inode number counter value n gives in slot.
func inoInSlot(n uint64, slot uint32) (uint64, error) {
	if n > maxInoHigh {
		return 0, fmt.Errorf("inode counter at %d: no inode numbers left", n)
	}
	return n<<slotBits | uint64(slot&slotMask), nil
}

// newDirSlot is the slot of a new directory name in directory parent:
// its parent's, or with probability switchProb (a draw u in [0,1)) the
// hash of parent and name. Hashing rather than drawing a slot keeps a
// replayed or retried mkdir, and the simulation, deterministic.
func newDirSlot(parent uint64, name string, switchProb, u float64) uint32 {
	if switchProb <= 0 || u >= switchProb {
		return slotOf(parent)
	}
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(parent >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(name))
	return uint32(h.Sum64() & slotMask)
}
