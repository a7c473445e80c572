package state

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/model"
)

// seq is a two-layer sequence: an attention cache of stride 2 and a
// recurrent layer with one convolution.
func seq() *Sequence {
	return &Sequence{
		Cache: []*HalfRows{{Stride: 2}, nil},
		Rec:   []*Recurrent{nil, {Conv: [][]float32{make([]float32, 3)}, SSM: make([]float32, 4)}},
	}
}

// step appends one position: a cache row and a new recurrent state, all
// valued v.
func step(s *Sequence, v float32) {
	row := s.Cache[0].Grow(1)
	row[0], row[1] = uint16(v), uint16(v)
	for i := range s.Rec[1].SSM {
		s.Rec[1].SSM[i] = v
	}
	for i := range s.Rec[1].Conv[0] {
		s.Rec[1].Conv[0][i] = -v
	}
	s.N++
}

// TestSnapshotRestore: a restored sequence holds the cache rows and the
// recurrent state of the snapshot's position, and the snapshot stays
// usable for a second restore.
func TestSnapshotRestore(t *testing.T) {
	s := seq()
	step(s, 1)
	step(s, 2)
	snap := s.Snapshot()
	if snap.Pos() != 2 || snap.Bytes() != 4*(4+3) {
		t.Fatalf("snapshot at %d of %d bytes", snap.Pos(), snap.Bytes())
	}
	for range 2 {
		step(s, 3)
		step(s, 4)
		if err := s.Restore(snap); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff([]uint16{1, 1, 2, 2}, s.Cache[0].Data); d != "" {
			t.Errorf("cache (-want +got):\n%s", d)
		}
		if d := cmp.Diff([]float32{2, 2, 2, 2}, s.Rec[1].SSM); d != "" {
			t.Errorf("ssm (-want +got):\n%s", d)
		}
		if d := cmp.Diff([]float32{-2, -2, -2}, s.Rec[1].Conv[0]); d != "" {
			t.Errorf("conv (-want +got):\n%s", d)
		}
		if s.Pos() != 2 {
			t.Errorf("position %d after restore", s.Pos())
		}
	}
}

type otherSnapshot struct{}

func (otherSnapshot) Pos() int     { return 0 }
func (otherSnapshot) Bytes() int64 { return 0 }

// TestRestoreRejects: a snapshot of another kind, of another shape or from
// a later position is an error and leaves the sequence as it was.
func TestRestoreRejects(t *testing.T) {
	s := seq()
	step(s, 1)
	later := seq()
	step(later, 1)
	step(later, 2)
	narrow := seq()
	narrow.Rec[1].SSM = make([]float32, 2)
	for name, snap := range map[string]model.Snapshot{"foreign": otherSnapshot{}, "later": later.Snapshot(), "shape": narrow.Snapshot()} {
		if err := s.Restore(snap); err == nil {
			t.Errorf("%s snapshot restored", name)
		}
		if s.Pos() != 1 || s.Rec[1].SSM[0] != 1 || s.Cache[0].Len != 1 {
			t.Errorf("%s snapshot changed the sequence", name)
		}
	}
}

// TestSetContext: the context caps a cache's capacity at its rows, where
// doubling alone would overshoot.
func TestSetContext(t *testing.T) {
	s := seq()
	s.SetContext(5)
	if s.Ctx != 5 || s.Cache[0].Max != 5 {
		t.Fatalf("context %d, cache max %d", s.Ctx, s.Cache[0].Max)
	}
	for v := range 5 {
		step(s, float32(v))
	}
	if c := cap(s.Cache[0].Data); c != 5*2 {
		t.Errorf("capacity %d values for 5 rows of 2", c)
	}
}

// TestBinaryRoundTrip: a sequence's binary form loads into a fresh
// sequence of the same shape, which then holds the same rows, recurrent
// state and position; the source is not disturbed.
func TestBinaryRoundTrip(t *testing.T) {
	s := seq()
	step(s, 1)
	step(s, 2)
	step(s, 3)
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != s.BinarySize() {
		t.Errorf("binary form of %d bytes, BinarySize %d", len(b), s.BinarySize())
	}
	d := seq()
	d.SetContext(8)
	if err := d.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if d.Pos() != 3 || d.Cache[0].Len != 3 || d.Ctx != 8 || d.Cache[0].Max != 8 {
		t.Fatalf("loaded at %d with %d rows, ctx %d", d.Pos(), d.Cache[0].Len, d.Ctx)
	}
	if diff := cmp.Diff(s.Cache[0].Data, d.Cache[0].Data); diff != "" {
		t.Errorf("cache (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(s.Rec, d.Rec); diff != "" {
		t.Errorf("recurrent (-want +got):\n%s", diff)
	}
	// the loaded sequence goes on like the source
	step(s, 4)
	step(d, 4)
	if diff := cmp.Diff(s.Cache[0].Data, d.Cache[0].Data); diff != "" {
		t.Errorf("after a step (-want +got):\n%s", diff)
	}
}

// TestBinaryRejects: a truncated, corrupted or foreign-shaped binary form
// is an error and leaves the sequence as it was.
func TestBinaryRejects(t *testing.T) {
	s := seq()
	step(s, 1)
	step(s, 2)
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	narrow := seq()
	narrow.Rec[1].SSM = make([]float32, 2)
	nb, _ := narrow.MarshalBinary()
	wide := &Sequence{Cache: []*HalfRows{{Stride: 3}, nil}, Rec: seq().Rec}
	wb, _ := wide.MarshalBinary()
	swapped := &Sequence{Cache: []*HalfRows{nil, {Stride: 2}}, Rec: []*Recurrent{seq().Rec[1], nil}}
	sb, _ := swapped.MarshalBinary()
	bad := map[string][]byte{
		"empty": nil, "magic": append([]byte("XXXX"), b[4:]...),
		"ssm shape": nb, "row stride": wb, "layer kinds": sb, "trailing": append(append([]byte(nil), b...), 0),
	}
	for n := 1; n < len(b); n += max(1, len(b)/17) {
		bad["truncated"+string(rune('a'+n%26))] = b[:n]
	}
	for name, data := range bad {
		d := seq()
		step(d, 7)
		if err := d.UnmarshalBinary(data); err == nil {
			t.Errorf("%s: loaded", name)
		}
		if d.Pos() != 1 || d.Rec[1].SSM[0] != 7 || d.Cache[0].Len != 1 || d.Cache[0].Data[0] != 7 {
			t.Errorf("%s: the sequence changed", name)
		}
	}
	short := seq()
	short.SetContext(1)
	if err := short.UnmarshalBinary(b); err == nil {
		t.Error("a state at 2 loaded into a context of 1")
	}
}
