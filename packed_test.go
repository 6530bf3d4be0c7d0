package braid_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// Small files on OSDs that pack them (as `braid osd` does): written,
// read back, rewritten past the pack's limit, read again after every OSD
// restarted, removed; and one OSD's loss is read around.
func TestSmallFilesOnPackedOSDs(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Pack: true})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(5, 37))
	want := map[string][]byte{}
	for i := range 40 {
		p := fmt.Sprintf("/f%02d", i)
		data := make([]byte, 1+rng.IntN(70<<10))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		testcluster.WriteFile(t, cl, p, braid.CreateOptions{Mode: 0o644, SizeHint: -1}, data)
		want[p] = data
	}
	check := func(when string) {
		t.Helper()
		for p, data := range want {
			got, err := get(t, cl, p)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: %s reads %d bytes (%v), want %d", when, p, len(got), err, len(data))
			}
		}
	}
	check("written")
	large := 0
	for _, data := range want {
		if len(data) > 64<<10 {
			large++
		}
	}
	if n := c.ObjectFiles(); n > 6*large {
		t.Fatalf("%d object files for %d files past 64 KiB: small objects were not packed", n, large)
	}
	// Grown past the pack's 64 KiB: the objects move to their own files.
	grown := bytes.Repeat([]byte("grown"), 40<<10)
	testcluster.WriteFile(t, cl, "/f00", braid.CreateOptions{Mode: 0o644, SizeHint: -1}, grown)
	want["/f00"] = grown
	check("rewritten")
	for i := range c.OSDs {
		c.RestartOSD(i)
	}
	check("after every OSD restarted")
	c.StopOSD(2)
	check("with an OSD down")
	for i := range 20 {
		p := fmt.Sprintf("/f%02d", i)
		if err := cl.Remove(ctx, p); err != nil {
			t.Fatal(err)
		}
		delete(want, p)
	}
	check("after removes")
}
