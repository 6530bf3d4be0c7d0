package osd

import (
	"os"
)

// FaultOp names a disk operation FaultFS can fail.
type FaultOp string

const (
	FaultOpen     FaultOp = "open"
	FaultRead     FaultOp = "read"
	FaultWrite    FaultOp = "write"
	FaultSync     FaultOp = "sync"
	FaultTruncate FaultOp = "truncate"
	FaultRemove   FaultOp = "remove"
)

// FaultFS wraps an FS and fails the operations Fault chooses, with the
// error it returns (ENOSPC, EIO, ...): a disk that fills up or breaks,
// for tests. Fault is called before every operation and must be safe for
// concurrent use; nil injects nothing. Writes go buffered (no O_DIRECT),
// so every one passes through Fault.
type FaultFS struct {
	FS
	Fault func(op FaultOp, path string) error
}

func (f *FaultFS) fault(op FaultOp, path string) error {
	if f.Fault == nil {
		return nil
	}
	return f.Fault(op, path)
}

func (f *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := f.fault(FaultOpen, name); err != nil {
		return nil, err
	}
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

func (f *FaultFS) Remove(name string) error {
	if err := f.fault(FaultRemove, name); err != nil {
		return err
	}
	return f.FS.Remove(name)
}

type faultFile struct {
	File
	fs   *FaultFS
	name string
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.fault(FaultRead, f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.fault(FaultWrite, f.name); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	if err := f.fs.fault(FaultSync, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.fault(FaultTruncate, f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Punch(off, n int64) error {
	if err := f.fs.fault(FaultWrite, f.name); err != nil {
		return err
	}
	return punch(f.File, off, n)
}
