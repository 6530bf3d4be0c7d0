package mds

// Sealed files' data keys (layout option enc=aes-gcm; the data format is
// internal/seal's). Each file gets its own key when it is created (or
// re-placed empty), stored only wrapped, under a key kept in a file of
// the MDS's directory, not in the metadata engine: a copy of the store
// opens no file. The key is handed out unwrapped, with the capability,
// in the answer to an open (which checked that the caller may read or
// write the file), over the authenticated connection, and never to the
// cluster's servers: OSDs and repair workers work on ciphertext. Object labels
// carry the wrapped key, so recover-metadata restores files that still
// open with the MDS's key.
//
// The same key authenticates the labels: each is stored with a MAC, so
// recover-metadata takes no label an OSD made up (with the wrapped key of
// a sealed file it holds, a mode that opens it to everyone and a path of
// its choosing). A sealed file is restored only from a label this MDS's
// key vouches for.
//
//	<dir>/filekeys.key   32 random bytes, hex (0600)
//	wrapped key          12-byte nonce || AES-256-GCM(data key, ad = "braid-file-key" || ino) (48 bytes)
//	label MAC            12-byte nonce || GCM tag of nothing, ad = "braid-label" || the label's encoding

import (
	"context"
	"crypto/cipher"
	"encoding/binary"
	"log/slog"
	"path/filepath"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/seal"
	"github.com/braidfs/braid/internal/wire"
)

const fileKeysFile = "filekeys.key"

// fileKeys holds the key of filekeys.key: it wraps sealed files' data
// keys, authenticates object labels, and seals the capability key ring
// where several MDS processes share it (keyring.go).
type fileKeys struct {
	wrap cipher.AEAD
	log  *slog.Logger
}

func fileKeyAD(ino uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("braid-file-key"), ino)
}

// sealNew gives rec, just placed with spec, a data key if spec seals it
// (the one it has, if it had one: handles open on it keep theirs), and
// none otherwise. The file is empty.
func (k *fileKeys) sealNew(rec *inodeRec, spec layout.Spec) {
	if spec.Sealed && rec.Sealed && len(rec.WrappedKey) > 0 {
		rec.DataSize = 0
		return
	}
	rec.Sealed, rec.DataSize, rec.WrappedKey = spec.Sealed, 0, nil
	if !spec.Sealed {
		return
	}
	rec.WrappedKey = sealWith(k.wrap, seal.NewKey(), fileKeyAD(rec.Ino))
}

// dataKeyFor is rec's data key for the caller of ctx, who may open it:
// nil for a file that is not sealed, and for the cluster's servers. A key
// that does not unwrap (another filekeys.key, or a label's key damaged)
// is an error, not a missing key.
func (k *fileKeys) dataKeyFor(ctx context.Context, rec *inodeRec) ([]byte, error) {
	if !rec.Sealed {
		return nil, nil
	}
	if p, ok := principal(ctx); ok && !mayHoldFileKeys(p.Role) {
		return nil, nil
	}
	key, err := openWith(k.wrap, rec.WrappedKey, fileKeyAD(rec.Ino))
	if err != nil {
		k.log.Error("a sealed file's key does not unwrap: is filekeys.key the one it was made with?", "ino", rec.Ino, "err", err)
		return nil, wire.Errorf(wire.ErrCorrupt, "inode %d: its key does not unwrap under this MDS's filekeys.key", rec.Ino)
	}
	return key, nil
}

// mayHoldFileKeys: the roles whose principals read and write files'
// plaintext (clients, the administrator, gateways); OSDs, repair workers and
// other MDSs work on ciphertext.
func mayHoldFileKeys(role string) bool {
	return role == auth.RoleClient || role == auth.RoleAdmin || role == auth.RoleGateway
}

func labelAD(label []byte) []byte { return append([]byte("braid-label"), label...) }

// sealLabel encodes l for the OSDs, with its MAC.
func (k *fileKeys) sealLabel(l mdsproto.ObjectLabel) ([]byte, error) {
	b, err := mdsproto.Marshal(l)
	if err != nil {
		return nil, err
	}
	return mdsproto.Marshal(mdsproto.SealedLabel{Label: b, MAC: sealWith(k.wrap, nil, labelAD(b))})
}

// labelMACValid reports whether mac is this MDS's over label.
func (k *fileKeys) labelMACValid(label, mac []byte) bool {
	_, err := openWith(k.wrap, mac, labelAD(label))
	return err == nil
}

// sealRing seals the capability key ring for the store.
func (k *fileKeys) sealRing(ring []byte) []byte { return sealWith(k.wrap, ring, keyCapRing) }

// openRing opens what sealRing sealed.
func (k *fileKeys) openRing(sealed []byte) ([]byte, error) {
	return openWith(k.wrap, sealed, keyCapRing)
}

// EnsureKeyFiles makes the key files of an MDS directory that are missing
// (filekeys.key, s3secrets.key), as a first start would, and returns their
// paths: MDS processes sharing one etcd cluster must hold the same.
func EnsureKeyFiles(dir string) ([]string, error) {
	var paths []string
	for _, f := range []struct{ name, what string }{{fileKeysFile, "file key wrapping key"}, {s3SealKeyFile, "S3 secret sealing key"}} {
		if _, err := loadSealKey(dir, f.name, f.what); err != nil {
			return nil, err
		}
		paths = append(paths, filepath.Join(dir, f.name))
	}
	return paths, nil
}
