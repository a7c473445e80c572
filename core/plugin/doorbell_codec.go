package plugin

import (
	"encoding/binary"
	"errors"
	"math"
	"unicode/utf8"

	"github.com/k3-inference/k3/core/quant"
)

// The doorbell's own encoding of an ExecuteRequest: fixed-width
// little-endian fields and length-prefixed strings. Encoding and decoding a
// decode step's batch through protobuf costs tens of µs and hundreds of
// allocations, as much as the rest of the doorbell; this costs one or two
// µs. It carries exactly what the protobuf form carries, with the same
// narrowing (Threads, Region and Kind to int32, Type to uint32), so a
// plugin sees the same request either way.
//
//	request: u32 threads, str arena, u32 regions, u32 ops, u32 weights,
//	         u32 arena refs, u32 i64s (shapes and ints), u32 floats,
//	         region..., op...
//	region:  i32 kind, i64 size, str path
//	op:      str name, u32 weights, u32 inputs, u32 outputs, u32 ints,
//	         u32 floats, weight..., (i64 offset, i64 size)..., i64...,
//	         f32 bits...
//	weight:  i32 region, u32 type, i64 offset, u32 shape, i64...
//	str:     u32 length, bytes

var le = binary.LittleEndian

// appendExecute appends r's encoding to b. It reports false for a string
// that is not UTF-8, which protobuf refuses: such a request goes to gRPC
// so that the caller gets gRPC's error.
func appendExecute(b []byte, r *ExecuteRequest) ([]byte, bool) {
	if !utf8.ValidString(r.Arena) {
		return b, false
	}
	b = le.AppendUint32(b, uint32(int32(r.Threads)))
	b = appendStr(b, r.Arena)
	b = le.AppendUint32(b, uint32(len(r.Regions)))
	b = le.AppendUint32(b, uint32(len(r.Ops)))
	var nw, nrefs, ni64, nfl int
	for i := range r.Ops {
		op := &r.Ops[i]
		nw += len(op.Weights)
		nrefs += len(op.Inputs) + len(op.Outputs)
		ni64 += len(op.Ints)
		nfl += len(op.Floats)
		for _, w := range op.Weights {
			ni64 += len(w.Shape)
		}
	}
	for _, n := range [...]int{nw, nrefs, ni64, nfl} {
		b = le.AppendUint32(b, uint32(n))
	}
	for _, rg := range r.Regions {
		if !utf8.ValidString(rg.Path) {
			return b, false
		}
		b = le.AppendUint32(b, uint32(int32(rg.Kind)))
		b = le.AppendUint64(b, uint64(rg.Size))
		b = appendStr(b, rg.Path)
	}
	for i := range r.Ops {
		op := &r.Ops[i]
		if !utf8.ValidString(op.Name) {
			return b, false
		}
		b = appendStr(b, op.Name)
		for _, n := range [...]int{len(op.Weights), len(op.Inputs), len(op.Outputs), len(op.Ints), len(op.Floats)} {
			b = le.AppendUint32(b, uint32(n))
		}
		for _, w := range op.Weights {
			b = le.AppendUint32(b, uint32(int32(w.Region)))
			b = le.AppendUint32(b, uint32(w.Type))
			b = le.AppendUint64(b, uint64(w.Offset))
			b = le.AppendUint32(b, uint32(len(w.Shape)))
			for _, s := range w.Shape {
				b = le.AppendUint64(b, uint64(s))
			}
		}
		for _, refs := range [...][]ArenaRef{op.Inputs, op.Outputs} {
			for _, a := range refs {
				b = le.AppendUint64(b, uint64(a.Offset))
				b = le.AppendUint64(b, uint64(a.Size))
			}
		}
		for _, x := range op.Ints {
			b = le.AppendUint64(b, uint64(x))
		}
		for _, f := range op.Floats {
			b = le.AppendUint32(b, math.Float32bits(f))
		}
	}
	return b, true
}

func appendStr(b []byte, s string) []byte {
	b = le.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

var errShortRequest = errors.New("doorbell: truncated request")

// execDecoder decodes requests. It keeps the strings it has seen (the
// arena, the region paths and the op names repeat from batch to batch) so
// that they are not allocated again; the rest is fresh per request, as
// protobuf's would be, but in one array per kind of field. It moves through
// them by index: re-slicing a field would cost a GC write barrier per read.
type execDecoder struct {
	b    []byte
	off  int
	err  bool
	strs map[string]string

	weights []WeightRef
	refs    []ArenaRef
	i64s    []int64
	floats  []float32
	// the next unused item of each array
	wi, ri, ii, fi int
}

func (d *execDecoder) take(n int) []byte {
	if d.err || n < 0 || n > len(d.b)-d.off {
		d.err = true
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *execDecoder) u32() uint32 {
	if d.err || len(d.b)-d.off < 4 {
		d.err = true
		return 0
	}
	x := le.Uint32(d.b[d.off:])
	d.off += 4
	return x
}

func (d *execDecoder) i64() int64 {
	if d.err || len(d.b)-d.off < 8 {
		d.err = true
		return 0
	}
	x := le.Uint64(d.b[d.off:])
	d.off += 8
	return int64(x)
}

// count reads a count of items of at least size bytes each, refusing one
// the rest of the request cannot hold.
func (d *execDecoder) count(size int) int {
	n := int(d.u32())
	if n > (len(d.b)-d.off)/size {
		d.err = true
		return 0
	}
	return n
}

func (d *execDecoder) str() string {
	p := d.take(int(d.u32()))
	if p == nil {
		return ""
	}
	if s, ok := d.strs[string(p)]; ok {
		return s
	}
	if d.strs == nil || len(d.strs) > 1024 {
		d.strs = map[string]string{}
	}
	s := string(p)
	d.strs[s] = s
	return s
}

// decode decodes one request from b.
func (d *execDecoder) decode(b []byte) (*ExecuteRequest, error) {
	d.b, d.off, d.err = b, 0, false
	r := &ExecuteRequest{Threads: int(int32(d.u32())), Arena: d.str()}
	nr, nops := d.count(16), d.count(24)
	d.weights = make([]WeightRef, d.count(20))
	d.refs = make([]ArenaRef, d.count(16))
	d.i64s = make([]int64, d.count(8))
	d.floats = make([]float32, d.count(4))
	d.wi, d.ri, d.ii, d.fi = 0, 0, 0, 0
	r.Regions = make([]Region, nr)
	for i := range r.Regions {
		kind, size := d.u32(), d.i64()
		r.Regions[i] = Region{Kind: RegionKind(int32(kind)), Size: size, Path: d.str()}
	}
	r.Ops = make([]Op, nops)
	for i := range r.Ops {
		op := &r.Ops[i]
		op.Name = d.str()
		nw, nin, nout, nints, nfl := d.count(20), d.count(16), d.count(16), d.count(8), d.count(4)
		if d.err || nw > len(d.weights)-d.wi {
			d.err = true
			break
		}
		if nw > 0 {
			op.Weights = d.weights[d.wi : d.wi+nw : d.wi+nw]
			d.wi += nw
		}
		for j := range op.Weights {
			w := &op.Weights[j]
			w.Region, w.Type, w.Offset = int(int32(d.u32())), quant.Type(d.u32()), d.i64()
			w.Shape = d.takeI64s(d.count(8))
		}
		op.Inputs, op.Outputs = d.takeRefs(nin), d.takeRefs(nout)
		op.Ints = d.takeI64s(nints)
		op.Floats = d.takeFloats(nfl)
	}
	b, d.b = d.b, nil
	if d.err || d.off != len(b) || d.wi != len(d.weights) || d.ri != len(d.refs) || d.ii != len(d.i64s) || d.fi != len(d.floats) {
		return nil, errShortRequest
	}
	return r, nil
}

// The take* functions hand out the next n items of their array, read from
// the request, capped so that appending to one does not overwrite the
// next; n == 0 gives nil, as protobuf does.

func (d *execDecoder) takeRefs(n int) []ArenaRef {
	if n == 0 || n > len(d.refs)-d.ri {
		d.err = d.err || n > 0
		return nil
	}
	rs := d.refs[d.ri : d.ri+n : d.ri+n]
	d.ri += n
	for i := range rs {
		rs[i] = ArenaRef{Offset: d.i64(), Size: d.i64()}
	}
	return rs
}

func (d *execDecoder) takeI64s(n int) []int64 {
	if n == 0 || n > len(d.i64s)-d.ii {
		d.err = d.err || n > 0
		return nil
	}
	xs := d.i64s[d.ii : d.ii+n : d.ii+n]
	d.ii += n
	for i := range xs {
		xs[i] = d.i64()
	}
	return xs
}

func (d *execDecoder) takeFloats(n int) []float32 {
	if n == 0 || n > len(d.floats)-d.fi {
		d.err = d.err || n > 0
		return nil
	}
	fs := d.floats[d.fi : d.fi+n : d.fi+n]
	d.fi += n
	for i := range fs {
		fs[i] = math.Float32frombits(d.u32())
	}
	return fs
}
