// Package durable writes small files (keys, credentials, superblocks) so
// that a crash leaves either the old content or the new, never a torn or
// missing file: the data is synced before it is put in place, and the
// directory after.
package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with b, readable as perm, through a synced
// temporary file beside it and a synced directory.
func WriteFile(path string, b []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // a stale one keeps its mode through O_TRUNC
	if err := writeSynced(tmp, b, os.O_EXCL, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// CreateFile writes b to path, which must not exist yet (ErrExists), and
// syncs it and its directory.
func CreateFile(path string, b []byte, perm os.FileMode) error {
	if err := writeSynced(path, b, os.O_EXCL, perm); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists; not overwriting it: %w", path, err)
		}
		return err
	}
	return syncDir(filepath.Dir(path))
}

func writeSynced(path string, b []byte, flag int, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
