package mds

import (
	"context"
	"errors"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// rename moves From to To atomically with POSIX rules: a file may replace
// a file, a directory may replace an empty directory, and a directory may
// not move into its own subtree.
func (s *Server) rename(ctx context.Context, req mdsproto.RenameReq) (struct{}, error) {
	var renamed *inodeRec
	err := s.mutate(ctx, func(tx kv.Txn) error {
		renamed = nil
		who := whoOf(ctx)
		srcDir, srcName, src, err := resolveEntry(tx, who, req.FromDir, req.From)
		if err != nil {
			return err
		}
		dstDir, dstName, err := resolveParent(tx, who, req.ToDir, req.To)
		if err != nil {
			return err
		}
		if err := mayRename(tx, who, srcDir, src, dstDir, dstName, req.To); err != nil {
			return err
		}
		if dstDir.Ino == srcDir.Ino {
			dstDir = srcDir // one record, so link-count changes land once
		}
		srcLinks, dstLinks := srcDir.Nlink, dstDir.Nlink // a moved or replaced directory changes them
		if src.Type == mdsproto.TypeDir {
			inside, err := isAncestor(tx, src.Ino, dstDir)
			if err != nil {
				return err
			}
			if inside {
				return wire.Errorf(wire.ErrInvalid, "cannot move %s into itself", req.From)
			}
		}
		if err := s.replaceTarget(tx, src, dstDir, dstName, req.To, req.NoReplace); err != nil {
			if errors.Is(err, errSameFile) {
				return nil
			}
			return err
		}
		if err := tx.Delete(direntKey(srcDir.Ino, srcName)); err != nil {
			return err
		}
		now := s.cfg.Now().UnixNano()
		if src.Type == mdsproto.TypeDir && srcDir.Ino != dstDir.Ino {
			srcDir.Nlink--
			dstDir.Nlink++
		}
		src.Parent, src.Name = dstDir.Ino, dstName
		renamed = src
		src.CtimeNs = now
		if err := putInode(tx, src); err != nil {
			return err
		}
		if err := touchParent(tx, srcDir, srcDir.Nlink != srcLinks, now); err != nil {
			return err
		}
		if srcDir.Ino != dstDir.Ino {
			if err := touchParent(tx, dstDir, dstDir.Nlink != dstLinks, now); err != nil {
				return err
			}
		}
		return link(tx, dstDir, dstName, src)
	})
	if err == nil && renamed != nil {
		s.labels.relabelTree(ctx, renamed)
	}
	return struct{}{}, err
}

var errSameFile = errors.New("rename onto the same file")

// replaceTarget checks what is at the destination and unlinks it if the
// rename may replace it.
func (s *Server) replaceTarget(tx kv.Txn, src, dstDir *inodeRec, dstName, path string, noReplace bool) error {
	old, ok, err := lookupChild(tx, dstDir.Ino, dstName)
	if err != nil || !ok {
		return err
	}
	if noReplace {
		return wire.Errorf(wire.ErrExists, "%s", path)
	}
	if old == src.Ino {
		return errSameFile
	}
	dst, err := getInode(tx, old)
	if err != nil {
		return err
	}
	switch {
	case src.Type == mdsproto.TypeDir && dst.Type != mdsproto.TypeDir:
		return wire.Errorf(wire.ErrNotDir, "%s is not a directory", path)
	case src.Type != mdsproto.TypeDir && dst.Type == mdsproto.TypeDir:
		return wire.Errorf(wire.ErrIsDir, "%s is a directory", path)
	case dst.Type == mdsproto.TypeDir:
		empty, err := dirEmpty(tx, dst.Ino)
		if err != nil {
			return err
		}
		if !empty {
			return wire.Errorf(wire.ErrNotEmpty, "%s", path)
		}
		dstDir.Nlink--
	}
	if err := tx.Delete(direntKey(dstDir.Ino, dstName)); err != nil {
		return err
	}
	return s.dropLink(tx, dst)
}
