package client

import (
	"bytes"
	"fmt"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/wire"
)

// Encoder computes a stripe's redundant units and rebuilds lost ones.
// shards holds K data then M redundant units, all the same length; on
// reconstruction, missing ones are nil.
type Encoder interface {
	Encode(shards [][]byte) error
	ReconstructData(shards [][]byte) error
	// Reconstruct rebuilds every missing unit, redundant ones included.
	Reconstruct(shards [][]byte) error
	// Verify reports whether the redundant units match the data.
	Verify(shards [][]byte) (bool, error)
}

func (c *Client) NewEncoder(s layout.Spec) (Encoder, error) {
	switch s.Scheme {
	case layout.EC:
		return c.encoder(s.K, s.M)
	case layout.Mirror:
		return mirrorCodec{}, nil
	}
	return stripeCodec{}, nil
}

// mirrorCodec: every unit is a copy of the single data unit.
type mirrorCodec struct{}

func (mirrorCodec) Encode(shards [][]byte) error {
	for _, s := range shards[1:] {
		copy(s, shards[0])
	}
	return nil
}

func (mirrorCodec) ReconstructData(shards [][]byte) error {
	if shards[0] != nil {
		return nil
	}
	for _, s := range shards[1:] {
		if s != nil {
			shards[0] = append([]byte(nil), s...)
			return nil
		}
	}
	return wire.Errorf(wire.ErrUnavail, "no copy left")
}

func (m mirrorCodec) Reconstruct(shards [][]byte) error {
	if err := m.ReconstructData(shards); err != nil {
		return err
	}
	for i := range shards {
		if shards[i] == nil {
			shards[i] = append([]byte(nil), shards[0]...)
		}
	}
	return nil
}

func (mirrorCodec) Verify(shards [][]byte) (bool, error) {
	for _, s := range shards[1:] {
		if !bytes.Equal(s, shards[0]) {
			return false, nil
		}
	}
	return true, nil
}

// stripeCodec: no redundancy.
type stripeCodec struct{}

func (stripeCodec) Encode([][]byte) error { return nil }
func (stripeCodec) ReconstructData(shards [][]byte) error {
	for i, s := range shards {
		if s == nil {
			return fmt.Errorf("%w: unit %d lost and stripe layout has no redundancy", wire.ErrUnavail, i)
		}
	}
	return nil
}

func (c stripeCodec) Reconstruct(shards [][]byte) error { return c.ReconstructData(shards) }
func (stripeCodec) Verify([][]byte) (bool, error)       { return true, nil }
