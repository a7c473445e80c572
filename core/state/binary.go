package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The binary form of a Sequence (AppendBinary) is what a prefix snapshot
// needs to move to another sequence of the same model or to disk: every
// attention layer's cached rows up to its length and every recurrent
// layer's state, little-endian, after a small header that lets Load check
// the shapes against the sequence it loads into.
//
//	"K3SQ" version:u32 n:u64 layers:u32
//	per layer: kind:u8 (0 none, 1 cache, 2 recurrent)
//	  cache:     stride:u32 rows:u32 rows*stride × u16
//	  recurrent: convs:u32 (len:u32 len × f32)… ssm:u32 ssm × f32
const (
	binMagic   = "K3SQ"
	binVersion = 1
)

const (
	kindNone byte = iota
	kindCache
	kindRecurrent
)

// BinarySize is the length of the binary form of s at its position.
func (s *Sequence) BinarySize() int {
	n := 4 + 4 + 8 + 4
	for i := range s.Cache {
		n++
		if c := s.Cache[i]; c != nil {
			n += 8 + 2*c.Len*c.Stride
		}
		if r := s.Rec[i]; r != nil {
			n += 4 + 4 + 4*len(r.SSM)
			for _, cv := range r.Conv {
				n += 4 + 4*len(cv)
			}
		}
	}
	return n
}

// AppendBinary implements encoding.BinaryAppender (and model.Portable):
// it appends the whole state at its position.
func (s *Sequence) AppendBinary(b []byte) ([]byte, error) {
	if len(s.Cache) != len(s.Rec) {
		return b, fmt.Errorf("state: sequence has %d cache and %d recurrent layers", len(s.Cache), len(s.Rec))
	}
	b = append(b, binMagic...)
	b = binary.LittleEndian.AppendUint32(b, binVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.N))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s.Cache)))
	for i, c := range s.Cache {
		r := s.Rec[i]
		switch {
		case c != nil && r != nil:
			return b, fmt.Errorf("state: layer %d has both a cache and a recurrent state", i)
		case c != nil:
			b = append(b, kindCache)
			b = binary.LittleEndian.AppendUint32(b, uint32(c.Stride))
			b = binary.LittleEndian.AppendUint32(b, uint32(c.Len))
			for _, v := range c.Data[:c.Len*c.Stride] {
				b = binary.LittleEndian.AppendUint16(b, v)
			}
		case r != nil:
			b = append(b, kindRecurrent)
			b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Conv)))
			for _, cv := range r.Conv {
				b = appendFloats(b, cv)
			}
			b = appendFloats(b, r.SSM)
		default:
			b = append(b, kindNone)
		}
	}
	return b, nil
}

func appendFloats(b []byte, x []float32) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x)))
	for _, v := range x {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (s *Sequence) MarshalBinary() ([]byte, error) {
	return s.AppendBinary(make([]byte, 0, s.BinarySize()))
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler (and
// model.Portable): it replaces s's contents with a state AppendBinary wrote
// from a sequence of the same model. The layers' kinds and shapes must
// match s's (a sequence NewState made), and the rows must fit s's context;
// otherwise, or when b is truncated or malformed, s is unchanged and the
// error says why.
func (s *Sequence) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if string(d.bytes(4)) != binMagic {
		return errors.New("state: not a sequence state (bad magic)")
	}
	if v := d.u32(); v != binVersion {
		return fmt.Errorf("state: sequence state version %d, want %d", v, binVersion)
	}
	n := d.u64()
	layers := d.u32()
	if d.err != nil {
		return d.err
	}
	if int(layers) != len(s.Cache) || len(s.Cache) != len(s.Rec) {
		return fmt.Errorf("state: state of %d layers for a sequence of %d", layers, len(s.Cache))
	}
	if s.Ctx > 0 && n > uint64(s.Ctx) {
		return fmt.Errorf("state: state at position %d does not fit a context of %d", n, s.Ctx)
	}
	// Decode everything before changing s, so that an error leaves it as
	// it was.
	rows := make([][]uint16, len(s.Cache))
	recs := make([]*Recurrent, len(s.Rec))
	for i := range s.Cache {
		kind := d.u8()
		if d.err != nil {
			return d.err
		}
		c, r := s.Cache[i], s.Rec[i]
		switch kind {
		case kindCache:
			if c == nil {
				return fmt.Errorf("state: layer %d is an attention cache in the state, not in the sequence", i)
			}
			stride, m := d.u32(), d.u32()
			if d.err != nil {
				return d.err
			}
			if int(stride) != c.Stride {
				return fmt.Errorf("state: layer %d has rows of %d values, the sequence %d", i, stride, c.Stride)
			}
			if uint64(m) > n || (c.Max > 0 && int(m) > c.Max) {
				return fmt.Errorf("state: layer %d holds %d rows at position %d", i, m, n)
			}
			raw := d.bytes(2 * int(m) * int(stride))
			if d.err != nil {
				return d.err
			}
			data := make([]uint16, int(m)*int(stride))
			for j := range data {
				data[j] = binary.LittleEndian.Uint16(raw[2*j:])
			}
			rows[i] = data
		case kindRecurrent:
			if r == nil {
				return fmt.Errorf("state: layer %d is recurrent in the state, not in the sequence", i)
			}
			if nc := d.u32(); d.err == nil && int(nc) != len(r.Conv) {
				return fmt.Errorf("state: layer %d has %d convolutions, the sequence %d", i, nc, len(r.Conv))
			}
			cp := &Recurrent{}
			for j := range r.Conv {
				cv := d.floats(len(r.Conv[j]))
				if d.err != nil {
					return fmt.Errorf("state: layer %d convolution %d: %w", i, j, d.err)
				}
				cp.Conv = append(cp.Conv, cv)
			}
			if cp.SSM = d.floats(len(r.SSM)); d.err != nil {
				return fmt.Errorf("state: layer %d: %w", i, d.err)
			}
			recs[i] = cp
		case kindNone:
			if c != nil || r != nil {
				return fmt.Errorf("state: layer %d is empty in the state, not in the sequence", i)
			}
		default:
			return fmt.Errorf("state: layer %d has unknown kind %d", i, kind)
		}
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("state: %d bytes after the sequence state", len(d.b))
	}
	for i, c := range s.Cache {
		if c != nil {
			c.Data, c.Len = rows[i], len(rows[i])/max(c.Stride, 1)
		}
	}
	for i, r := range s.Rec {
		if r != nil { // in place: the sequence keeps its slices
			copy(r.SSM, recs[i].SSM)
			for j := range r.Conv {
				copy(r.Conv[j], recs[i].Conv[j])
			}
		}
	}
	s.N = int(n)
	return nil
}

// decoder reads little-endian values, remembering the first shortfall.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("state: sequence state is truncated")

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = errShort
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u8() byte {
	if b := d.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// floats reads a length-prefixed float32 vector that must hold want
// values.
func (d *decoder) floats(want int) []float32 {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if int(n) != want {
		d.err = fmt.Errorf("state: %d values where the sequence has %d", n, want)
		return nil
	}
	raw := d.bytes(4 * want)
	if d.err != nil {
		return nil
	}
	out := make([]float32, want)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}
