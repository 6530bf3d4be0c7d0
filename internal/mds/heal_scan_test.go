package mds

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/core/cluster"
)

// TestLateScanBatchLeavesCursor: repair workers scan concurrently, so a batch can
// finish after another one has moved the cursor. Such a late batch must not
// move the cursor back nor end the pass as clean: the pass it would end
// has not been read.
func TestLateScanBatchLeavesCursor(t *testing.T) {
	ctx := context.Background()
	key, err := capability.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	moved := []byte("i\x00\x00\x00\x00\x00\x00\x00\x07") // where another repair worker's batch left it
	s.repairs.mu.Lock()
	s.repairs.cursor, s.repairs.cycleMap, s.repairs.cycleClean, s.repairs.steadyMap = moved, "map", true, ""
	s.repairs.mu.Unlock()

	// A batch that started at the beginning of the pass reads to the end
	// (the only inode is the root) and finds nothing.
	s.repairs.scanInodes(ctx, nil, map[uint32]cluster.View{}, time.Now())

	s.repairs.mu.Lock()
	defer s.repairs.mu.Unlock()
	if !bytes.Equal(s.repairs.cursor, moved) {
		t.Fatalf("late batch moved the cursor to %q", s.repairs.cursor)
	}
	if s.repairs.steadyMap != "" {
		t.Fatal("late batch ended the pass as clean")
	}
}
