// Package braid is the client library of the braid parallel file system.
// It asks the MDS for a file's layout and capability, then reads and
// writes the file's component objects on the OSDs directly and in
// parallel, computing erasure codes itself; file data never passes
// through the MDS.
//
//	c, err := braid.Dial(ctx, "127.0.0.1:7000")
//	f, err := c.Create(ctx, "/data/x", braid.CreateOptions{Layout: "ec:4+2"})
//	_, err = f.WriteAt(buf, 0)
//	err = f.Close() // durable on the OSDs and size recorded at the MDS
//
// This package is the public API. Its engine lives in internal/client
// (the MDS session, caches, write-back and the striped file I/O), the
// repair worker in internal/repairworker and the consistency checker in
// internal/checker.
package braid
