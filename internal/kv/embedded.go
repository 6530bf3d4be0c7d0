package kv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sys/unix"
)

// The embedded store in an MDS directory:
//
//	meta/               the Pebble store
//	meta/MOVED_FROM_BBOLT  present in a store made by moving meta.db
//	meta.db             a bbolt store of an older braid, moved into meta/
//	                    when the MDS starts, then renamed meta.db.moved
//	meta.moving/        a move in progress (a crash leaves it; it is redone)
const (
	pebbleDirName = "meta"
	boltFileName  = "meta.db"
	movingDirName = "meta.moving"
	movedSuffix   = ".moved"
	movedMarker   = "MOVED_FROM_BBOLT"

	// moveBatchBytes bounds one batch of keys copied from bbolt.
	moveBatchBytes = 4 << 20
)

// EmbeddedExists reports whether dir holds an embedded store (of this
// braid or an older one).
func EmbeddedExists(dir string) bool {
	for _, name := range []string{pebbleDirName, boltFileName, movingDirName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// OpenEmbedded opens the MDS's embedded store in dir, first moving the
// contents of an older braid's bbolt store into a new Pebble one.
func OpenEmbedded(ctx context.Context, dir string, log *slog.Logger) (Engine, error) {
	pebbleDir := filepath.Join(dir, pebbleDirName)
	boltPath := filepath.Join(dir, boltFileName)
	_, err := os.Stat(boltPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := moveBoltToPebble(ctx, boltPath, pebbleDir, log); err != nil {
			return nil, fmt.Errorf("move %s into %s: %w", boltPath, pebbleDir, err)
		}
	}
	return OpenPebble(pebbleDir, log)
}

// moveBoltToPebble copies every key of the bbolt store at boltPath into a
// Pebble store made beside it, and only then puts that store in place and
// renames the bbolt file. Each step can be cut by a crash and redone: the
// bbolt file goes last, and the Pebble store appears complete or not at all.
func moveBoltToPebble(ctx context.Context, boltPath, pebbleDir string, log *slog.Logger) error {
	dir := filepath.Dir(boltPath)
	if _, err := os.Stat(pebbleDir); err == nil {
		// A crash between putting the store in place and renaming the
		// bbolt file leaves both; any other store beside meta.db is not
		// the move's, and which one is the namespace is not for braid
		// to guess.
		if _, err := os.Stat(filepath.Join(pebbleDir, movedMarker)); err != nil {
			return fmt.Errorf("both %s and %s exist, and %s was not made from it: move one of them away", boltPath, pebbleDir, pebbleDir)
		}
		return renameDurably(boltPath, boltPath+movedSuffix)
	}
	moving := filepath.Join(dir, movingDirName)
	if err := os.RemoveAll(moving); err != nil {
		return err
	}
	src, err := OpenBolt(boltPath)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := OpenPebble(moving, log)
	if err != nil {
		return err
	}
	keys, err := copyInto(ctx, src, dst)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := writeDurably(filepath.Join(moving, movedMarker), []byte(boltPath+"\n")); err != nil {
		return err
	}
	if err := renameDurably(moving, pebbleDir); err != nil {
		return err
	}
	log.Info("metadata store moved from bbolt to pebble", "keys", keys, "old", boltPath+movedSuffix)
	return renameDurably(boltPath, boltPath+movedSuffix)
}

// copyInto copies every key of src into dst, syncing the last batch.
func copyInto(ctx context.Context, src *Bolt, dst *Pebble) (int, error) {
	n := 0
	b := dst.db.NewBatch()
	err := src.View(ctx, func(r Reader) error {
		return scanAll(r, func(k, v []byte) error {
			if err := b.Set(k, v, nil); err != nil {
				return err
			}
			n++
			if b.Len() < moveBatchBytes {
				return nil
			}
			err := b.Commit(pebble.NoSync)
			b.Close()
			b = dst.db.NewBatch()
			return err
		})
	})
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	b.Close()
	return n, err
}

// scanAll calls fn for every key of r, stopping at fn's first error.
func scanAll(r Reader, fn func(k, v []byte) error) error {
	var ferr error
	err := r.Scan(nil, nil, func(k, v []byte) bool {
		ferr = fn(k, v)
		return ferr == nil
	})
	if ferr != nil {
		return ferr
	}
	return err
}

// renameDurably renames from to to, which must not exist, and syncs
// their directory.
func renameDurably(from, to string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
		return fmt.Errorf("rename %s to %s: %w", from, to, err)
	}
	d, err := os.Open(filepath.Dir(to))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// writeDurably writes a new file and syncs it.
func writeDurably(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
