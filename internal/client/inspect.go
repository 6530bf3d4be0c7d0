package client

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// What the checker (internal/checker) reads of an open file beyond the
// public API: its layout and stored size, the data maps of its objects,
// and every unit of a stripe as stored.

// StoredSize is the file's size as last recorded or written here.
func (f *File) StoredSize() int64 { return f.storedSize() }

// Layout is the file's current layout.
func (f *File) Layout() layout.Layout { return f.layout() }

// ExtentOf is how far the objects of component comp's group hold
// written data, as the MDS recorded it.
func (f *File) ExtentOf(comp int) int64 { return f.extentOf(comp) }

// Encoder is the file's erasure code.
func (f *File) Encoder() Encoder { return f.enc }

// DataMaps is what the OSDs said of which units of a file's objects hold
// data (datamap.go).
type DataMaps struct{ m unitMap }

// DataMaps asks every clean component's OSD which of its units hold data.
func (f *File) DataMaps(ctx context.Context) DataMaps { return DataMaps{f.dataMaps(ctx)} }

// Hole reports whether file stripe fs is known to hold no data.
func (d DataMaps) Hole(lay layout.Layout, fs int64) bool { return d.m.hole(lay, fs) }

// Object is the length and version of component comp's object as its OSD
// reported them; nil: not known.
func (d DataMaps) Object(comp int) *osdproto.ObjectInfo { return d.m.infos[comp] }

// Components is how many components the maps cover.
func (d DataMaps) Components() int { return len(d.m.infos) }

// ReadStripeUnits reads the first n bytes of every unit of file stripe fs;
// units that are dirty or unreadable come back nil and listed in missing,
// and those that are corrupt or lost (not merely unreachable) in lost.
func (f *File) ReadStripeUnits(ctx context.Context, fs int64, n int) (shards [][]byte, missing []int, lost []error) {
	lay := f.layout()
	w := lay.Spec.Width()
	shards = make([][]byte, w)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for u := 0; u < w; u++ {
		loc := lay.UnitOf(fs, u)
		if f.isDirty(loc.Component) {
			missing = append(missing, u)
			continue
		}
		buf := wire.GetBuf(n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.readUnit(ctx, loc.Component, loc.ObjectOff, buf, false); err != nil {
				wire.PutBuf(buf)
				mu.Lock()
				missing = append(missing, u)
				if errors.Is(err, wire.ErrCorrupt) || errors.Is(err, wire.ErrLost) {
					lost = append(lost, err)
				}
				mu.Unlock()
				return
			}
			shards[u] = buf
		}()
	}
	wg.Wait()
	slices.Sort(missing)
	return shards, missing, lost
}
