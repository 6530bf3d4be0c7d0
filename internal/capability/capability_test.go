package capability

import (
	"errors"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	key, _ := NewKey()
	other, _ := NewKey()
	now := time.Unix(1_700_000_000, 0)
	good := key.Issue(42, Read|Write, 3, now.Add(time.Minute))
	tampered := good
	tampered.Rights = Read | Write | 4
	raised := key.Issue(42, Read, 3, now.Add(time.Minute))
	raised.Rights = Read | Write // client tries to upgrade its rights
	for _, tc := range []struct {
		name string
		cap  Cap
		ino  uint64
		need Rights
		now  time.Time
		want error
	}{
		{"valid read", good, 42, Read, now, nil},
		{"valid write", good, 42, Write, now, nil},
		{"forged by another key", other.Issue(42, Read|Write, 3, now.Add(time.Minute)), 42, Read, now, ErrForged},
		{"tampered rights", tampered, 42, Read, now, ErrForged},
		{"upgraded rights", raised, 42, Write, now, ErrForged},
		{"expired", good, 42, Read, now.Add(2 * time.Minute), ErrExpired},
		{"wrong object", good, 43, Read, now, ErrWrongFile},
		{"read-only cap writing", key.Issue(42, Read, 3, now.Add(time.Minute)), 42, Write, now, ErrRights},
	} {
		if err := key.Check(tc.cap, tc.ino, tc.need, tc.now); !errors.Is(err, tc.want) {
			t.Errorf("%s: Check = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	key, _ := NewKey()
	c := key.Issue(7, Read, 9, time.Unix(5, 6))
	d, err := Decode(c.Encode())
	if err != nil || d != c {
		t.Fatalf("round trip: %+v %v", d, err)
	}
	if _, err := Decode(c.Encode()[:10]); !errors.Is(err, ErrEncoding) {
		t.Fatalf("short capability accepted: %v", err)
	}
}

func TestSignatures(t *testing.T) {
	key, _ := NewKey()
	sig := key.Sign("hb", []byte("osd 3"))
	if !key.VerifySignature("hb", []byte("osd 3"), sig) || key.VerifySignature("hb", []byte("osd 4"), sig) || key.VerifySignature("x", []byte("osd 3"), sig) {
		t.Fatal("signature check wrong")
	}
}

func FuzzDecode(f *testing.F) {
	key, _ := NewKey()
	f.Add(key.Issue(1, Read, 1, time.Unix(1, 0)).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		if string(c.Encode()) != string(b) {
			t.Fatal("decode/encode not inverse")
		}
		_ = key.Check(c, c.Ino, Read, time.Unix(0, 0))
	})
}
