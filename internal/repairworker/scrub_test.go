package repairworker

import (
	"errors"
	"slices"
	"testing"

	"github.com/braidfs/braid/internal/wire"
)

// A disagreeing mirror stripe rewrites the copies that differ from the
// majority, and the first copy wins a tie.
func TestMirrorMinority(t *testing.T) {
	for _, tc := range []struct {
		shards []string
		want   []int
	}{
		{[]string{"a", "a", "a"}, nil},
		{[]string{"a", "b", "a"}, []int{1}},
		{[]string{"b", "a", "a"}, []int{0}},
		{[]string{"a", "b"}, []int{1}},         // a tie: the first copy wins
		{[]string{"a", "b", "c"}, []int{1, 2}}, // no majority: the first copy wins
	} {
		shards := make([][]byte, len(tc.shards))
		for i, s := range tc.shards {
			shards[i] = []byte(s)
		}
		if got := mirrorMinority(shards); !slices.Equal(got, tc.want) {
			t.Errorf("mirrorMinority(%q) = %v, want %v", tc.shards, got, tc.want)
		}
	}
}

// A stripe is lost only when too few units are left to decode it; while
// enough are merely unreachable, the error is the unreachable one.
func TestLostOrUnavail(t *testing.T) {
	unreachable := wire.Errorf(wire.ErrUnavail, "OSD 3 is down")
	if err := lostOrUnavail(unreachable, 0, 7, 1, 6, 4); err != unreachable {
		t.Fatalf("one unit gone of six where four are needed: %v, want the unreachable error", err)
	}
	err := lostOrUnavail(unreachable, 1, 7, 3, 6, 4)
	var lost *stripeLost
	if !errors.As(err, &lost) || !errors.Is(err, wire.ErrUnavail) {
		t.Fatalf("three units gone of six where four are needed: %v, want a stripeLost wrapping the cause", err)
	}
	if want := "stripe 7 of parity group 1: 3 units lost or corrupt, 3 left where 4 are needed"; lost.what != want {
		t.Fatalf("lost stripe named %q, want %q", lost.what, want)
	}
	if !goneErr(wire.Errorf(wire.ErrCorrupt, "x")) || !goneErr(wire.Errorf(wire.ErrLost, "x")) || goneErr(unreachable) {
		t.Fatal("goneErr must take lost and corrupt units as gone, unreachable ones not")
	}
}
