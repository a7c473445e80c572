package plugin

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/k3-inference/k3/core/plugin/internal/pb"
	"github.com/k3-inference/k3/core/quant"
)

// decodeReq is a decode step's batch as the engine sends it: a dozen
// matmuls over one shard and the arena.
func decodeReq() *ExecuteRequest {
	r := &ExecuteRequest{Arena: "/dev/shm/k3-arena-12345-987654321", Threads: 2,
		Regions: []Region{{Kind: RegionShard, Path: "/tmp/syn/k3q2.gguf"}, {Kind: RegionShm, Path: "/dev/shm/slots", Size: 1 << 30}}}
	for i := range 12 {
		r.Ops = append(r.Ops, Op{Name: "matmul",
			Weights: []WeightRef{{Region: i % 2, Offset: 123456789 + int64(i)*1000000, Type: quant.Q2_K, Shape: []int64{7168, 2048}}},
			Inputs:  []ArenaRef{{Offset: 1 << 20, Size: 7168 * 4}}, Outputs: []ArenaRef{{Offset: 2<<20 + int64(i)*8192, Size: 2048 * 4}},
			Ints: []int64{1, int64(i % 2)}})
	}
	return r
}

// viaProto is what a plugin gets for r over gRPC.
func viaProto(t testing.TB, r *ExecuteRequest) *ExecuteRequest {
	b, err := proto.Marshal(toprotoExecuteRequest(r))
	if err != nil {
		t.Fatal(err)
	}
	var m pb.ExecuteRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return fromprotoExecuteRequest(&m)
}

// TestDoorbellCodec: a plugin gets the same request through the doorbell
// as over gRPC, field for field, nil and narrowing included.
func TestDoorbellCodec(t *testing.T) {
	odd := &ExecuteRequest{Arena: "a", Threads: 1<<32 + 3, Regions: []Region{{Kind: RegionKind(-1), Path: "", Size: -5}},
		Ops: []Op{
			{},
			{Name: "axpy", Floats: []float32{2, float32(math.Inf(-1)), -0.0}, Outputs: []ArenaRef{{1, 2}, {3, 4}}},
			{Name: "x", Weights: []WeightRef{{Region: 1<<31 + 7, Offset: -1, Type: quant.Type(1<<31 + 2)}, {Shape: []int64{1, 2, 3}}}, Ints: []int64{math.MinInt64}},
		}}
	var d execDecoder
	for name, r := range map[string]*ExecuteRequest{"decode": decodeReq(), "empty": {}, "odd": odd} {
		b, ok := appendExecute(nil, r)
		if !ok {
			t.Fatalf("%s: not encoded", name)
		}
		for range 2 { // the second decode reuses the decoder's strings
			got, err := d.decode(b)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if diff := cmp.Diff(viaProto(t, r), got); diff != "" {
				t.Errorf("%s: doorbell and gRPC requests differ (-grpc +doorbell):\n%s", name, diff)
			}
		}
		// A cut or padded request is refused, never half-read.
		for n := range len(b) {
			if _, err := d.decode(b[:n]); err == nil {
				t.Fatalf("%s: request cut to %d of %d bytes decoded", name, n, len(b))
			}
		}
		if _, err := d.decode(append(b[:len(b):len(b)], 0)); err == nil {
			t.Errorf("%s: padded request decoded", name)
		}
	}
	// Appending to a decoded slice does not reach into the next op's.
	r, _ := d.decode(must(appendExecute(nil, decodeReq())))
	_ = append(r.Ops[0].Ints, 99)
	if r.Ops[1].Weights[0].Shape[0] != 7168 {
		t.Error("an append to op 0's ints overwrote op 1")
	}
	// Not UTF-8: protobuf refuses it, so the doorbell leaves it to gRPC.
	if _, ok := appendExecute(nil, &ExecuteRequest{Arena: "\xff"}); ok {
		t.Error("a non-UTF-8 arena path was encoded")
	}
}

func must(b []byte, ok bool) []byte {
	if !ok {
		panic("not encoded")
	}
	return b
}

// BenchmarkDoorbellCodec compares the doorbell's encoding of a decode
// step's batch with protobuf's, both ways.
func BenchmarkDoorbellCodec(b *testing.B) {
	r := decodeReq()
	buf := make([]byte, 0, 1<<20)
	b.Run("doorbell", func(b *testing.B) {
		b.ReportAllocs()
		var d execDecoder
		for b.Loop() {
			out, _ := appendExecute(buf[:0], r)
			if _, err := d.decode(out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		var m pb.ExecuteRequest
		for b.Loop() {
			out, _ := proto.MarshalOptions{}.MarshalAppend(buf[:0], toprotoExecuteRequest(r))
			if err := proto.Unmarshal(out, &m); err != nil {
				b.Fatal(err)
			}
			_ = fromprotoExecuteRequest(&m)
		}
	})
}
