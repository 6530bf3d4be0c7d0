package checker

import (
	"bytes"
	"strings"
	"testing"

	"github.com/klauspost/reedsolomon"

	"github.com/braidfs/braid/internal/layout"
)

// verifyStripe tells a consistent stripe from one whose units disagree,
// with all units read or some missing, and says when too few are left.
func TestVerifyStripe(t *testing.T) {
	spec := layout.Spec{Scheme: layout.EC, K: 4, M: 2, UnitBytes: 64}
	enc, err := reedsolomon.New(spec.K, spec.M)
	if err != nil {
		t.Fatal(err)
	}
	stripe := func() [][]byte {
		shards := make([][]byte, spec.Width())
		for u := range shards {
			shards[u] = bytes.Repeat([]byte{byte(u + 1)}, 64)
		}
		if err := enc.Encode(shards); err != nil {
			t.Fatal(err)
		}
		return shards
	}
	drop := func(shards [][]byte, units ...int) [][]byte {
		for _, u := range units {
			shards[u] = nil
		}
		return shards
	}
	flip := func(shards [][]byte, u int) [][]byte {
		shards[u][3] ^= 0x40
		return shards
	}
	for _, tc := range []struct {
		name    string
		shards  [][]byte
		missing []int
		want    string // "" or a substring of the complaint
	}{
		{"all read and consistent", stripe(), nil, ""},
		{"all read, a data unit flipped", flip(stripe(), 1), nil, "parity disagrees"},
		{"all read, a parity unit flipped", flip(stripe(), 5), nil, "parity disagrees"},
		{"one missing, the rest consistent", drop(stripe(), 2), []int{2}, ""},
		{"one missing, a unit flipped", flip(drop(stripe(), 2), 0), []int{2}, "disagrees with the others"},
		{"exactly K read: decodes, unverified", drop(stripe(), 0, 5), []int{0, 5}, ""},
		{"fewer than K read", drop(stripe(), 0, 1, 5), []int{0, 1, 5}, "only 3 of 6 units readable"},
	} {
		got := verifyStripe(enc, spec, tc.shards, tc.missing)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: verifyStripe = %q, want %q", tc.name, got, tc.want)
		}
	}
}
