// Package seal is the format of encrypted files' data (layout option
// enc=aes-gcm): authenticated encryption in blocks, done by the client
// before erasure coding, so OSDs, healers, scrubs and recover-metadata
// hold, move and check ciphertext only.
//
// A file's plaintext is cut into blocks of BlockBytes (4 KiB; the last
// may be shorter). Block i is stored at i × StoredBlockBytes of the
// file's data, as
//
//	nonce (16 random bytes) || AES-256-GCM(key, nonce, plaintext, ad) (len(plaintext) + 16-byte tag)
//
// with additional data ad = "braid-seal-v1" || i (8 bytes, big endian):
// a block moved to another index, or to another file (each file has its
// own key), does not open. Every write of a block draws a new nonce, so
// a block rewritten in place never reuses one; with 128-bit random
// nonces (as gocryptfs uses) the chance of a repeat stays negligible far
// beyond any file's lifetime of writes.
//
// A stored block of zeros only is a hole and reads as zeros (a sparse
// file, an extended or punched range): ciphertext of all zeros is as
// likely as a nonce of all zeros. So whoever can write an OSD's objects
// can zero a whole block unnoticed by the cipher (the OSDs' checksums and
// the scrub still see a changed object); nor does a block carry a
// version: an old copy of a block put back in its place opens. Both are
// gocryptfs's limits too.
//
// The stored size follows from the plaintext size (and back): full
// blocks take StoredBlockBytes, a last partial block of r bytes r +
// Overhead. The MDS records the stored size, which the layout's
// arithmetic works on, and reports the plaintext size as the file's.
//
// Keys: each file has its own 256-bit data key, made by the MDS when the
// file is created, stored only wrapped (AES-256-GCM) under a key in the
// MDS's directory, and handed, unwrapped, over the authenticated control
// connection, with the capability, to principals that may open the file.
// Healers and OSDs are never given one.
package seal
