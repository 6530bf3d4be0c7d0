package client

import (
	"testing"
	"time"
)

// Size answers while the handle's lock is held (a flush holds it while
// it reads and sends stripes; a mount's lookups and getattr ask a
// writer's size meanwhile), with the size last set under it.
func TestSizeDoesNotWaitForTheHandle(t *testing.T) {
	var f File
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setSizeLocked(42)
	got := make(chan int64, 1)
	go func() { got <- f.Size() }()
	select {
	case n := <-got:
		if n != 42 {
			t.Fatalf("Size = %d, want 42", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Size waited for the handle's lock")
	}
}
