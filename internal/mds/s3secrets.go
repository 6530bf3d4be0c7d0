package mds

// S3 secrets are stored sealed (AES-256-GCM) under a key kept in a file
// of the MDS's directory, not in the metadata engine: a copy of the store
// (a backup, an etcd snapshot, a disk read by someone else) holds no
// secret that signs requests. The additional data binds each sealed
// secret to its user and access key, so one cannot be moved to another.
//
//	<dir>/s3secrets.key   32 random bytes, hex (0600)
//	sealed secret         12-byte nonce || ciphertext || 16-byte tag

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/braidfs/braid/internal/durable"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/wire"
)

const s3SealKeyFile = "s3secrets.key"

// loadSealKey reads the AES-256-GCM key in dir's file name (what names
// its use), making it on first use.
func loadSealKey(dir, name, what string) (cipher.AEAD, error) {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b, err = makeSealKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("%s %s: want 64 hex digits", what, path)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func makeSealKey(path string) ([]byte, error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand does not fail on Linux
	b := []byte(hex.EncodeToString(key) + "\n")
	return b, durable.CreateFile(path, b, 0o600)
}

func sealAD(name, access string) []byte { return []byte(name + "\x00" + access) }

// sealWith seals plain under aead with additional data ad, as
// nonce || ciphertext || tag (the form of everything the MDS seals: S3
// secrets, files' data keys, labels' MACs).
func sealWith(aead cipher.AEAD, plain, ad []byte) []byte {
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	_, _ = rand.Read(nonce) // crypto/rand does not fail on Linux
	return aead.Seal(nonce, nonce, plain, ad)
}

// openWith opens what sealWith sealed.
func openWith(aead cipher.AEAD, sealed, ad []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(sealed) < n {
		return nil, fmt.Errorf("sealed value of %d bytes", len(sealed))
	}
	return aead.Open(nil, sealed[:n], sealed[n:], ad)
}

// sealSecret stores rec's secret sealed, and not in the clear.
func (u3 *s3Users) sealSecret(rec *s3UserRec) {
	rec.Sealed = sealWith(u3.seal, []byte(rec.SecretKey), sealAD(rec.Name, rec.AccessKey))
	rec.SecretKey = ""
}

// secretOf is rec's secret: opened, or as an older MDS stored it.
func (u3 *s3Users) secretOf(rec *s3UserRec) (string, error) {
	if rec.Sealed == nil {
		return rec.SecretKey, nil
	}
	secret, err := openWith(u3.seal, rec.Sealed, sealAD(rec.Name, rec.AccessKey))
	if err != nil {
		return "", wire.Errorf(wire.ErrCorrupt, "S3 user %s: the secret does not open with %s", rec.Name, s3SealKeyFile)
	}
	return string(secret), nil
}

// sealStored seals the secrets an older MDS stored in the clear.
func (u3 *s3Users) sealStored(ctx context.Context) error {
	return u3.kv.Update(ctx, func(tx kv.Txn) error {
		var open []s3UserRec
		err := tx.Scan(s3UserPrefix, pastPrefix(s3UserPrefix), func(_, v []byte) bool {
			var rec s3UserRec
			if decodeRecord(v, &rec) == nil && rec.SecretKey != "" {
				open = append(open, rec)
			}
			return true
		})
		if err != nil {
			return err
		}
		for i := range open {
			u3.sealSecret(&open[i])
			if err := putRecord(tx, s3UserKey(open[i].Name), open[i]); err != nil {
				return err
			}
		}
		return nil
	})
}
