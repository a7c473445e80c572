package plugin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/k3-inference/k3/core/plugin/internal/wire"
	"github.com/k3-inference/k3/core/quant"
)

// recorder is a Stager and Kernels that remembers what it was sent and
// answers with canned values, to check that the wire format loses nothing.
type recorder struct {
	got      []any
	fail     error
	noRecord bool // benchmarks keep nothing
}

var (
	cannedOpen    = &OpenResponse{Regions: []Region{{Kind: RegionShard, Path: "/m/a.gguf", Size: 1 << 40}, {Kind: RegionShm, Path: "/dev/shm/x", Size: 12345}}, Mode: "test mode"}
	cannedAcquire = &AcquireResponse{Locations: []Location{{Region: 1, Offset: 4096, Size: 5003}, {Region: 0, Offset: 1<<39 + 7, Size: 1}, {}}, Pending: []int{2}}
	cannedStats   = &Stats{Hits: 1, Misses: 2, Evictions: 3, Reads: 4, BytesRead: 5, ReadTime: 6, WaitTime: 7, ResidentBytes: 8, BudgetBytes: 9, DirectIO: true, Mode: "m",
		Devices: []DeviceStats{{Name: "259:1", Workers: 4, Shards: []int{0, 2}, Reads: 10, BytesRead: 11, ReadTime: 12}, {Name: "/mnt/b", Workers: 1, Shards: []int{1}}}}
	cannedInfo = &KernelsInfo{Name: "k", Ops: []OpSupport{{Op: "mul_mat", Types: []quant.Type{quant.Q2_K, quant.Q3_K}}, {Op: "rms_norm", Types: []quant.Type{}}},
		Options: []OptionSpec{{Name: "float", Type: OptionString, Default: "exact", Doc: "d", Values: []string{"exact", "fast"}}}}
	cannedStager = &StagerInfo{Name: "s", Options: []OptionSpec{
		{Name: "io_workers", Type: OptionInt, Default: "4", Doc: "readers"}, {Name: "warm", Type: OptionBool, Default: "true"}}}
)

func (r *recorder) Describe(context.Context) (*StagerInfo, error) { return cannedStager, r.fail }

func (r *recorder) Open(_ context.Context, req *OpenRequest) (*OpenResponse, error) {
	r.got = append(r.got, req)
	return cannedOpen, r.fail
}
func (r *recorder) Hint(_ context.Context, req *HintRequest) error {
	r.got = append(r.got, req)
	return r.fail
}
func (r *recorder) Acquire(_ context.Context, req *AcquireRequest) (*AcquireResponse, error) {
	if r.noRecord {
		return cannedAcquire, nil
	}
	r.got = append(r.got, req)
	return cannedAcquire, r.fail
}
func (r *recorder) Release(_ context.Context, req *ReleaseRequest) error {
	r.got = append(r.got, req)
	return r.fail
}
func (r *recorder) Stats(context.Context) (*Stats, error) { return cannedStats, r.fail }
func (r *recorder) Close(context.Context) error           { return r.fail }

// recordingKernels is the Kernels side of a recorder (a type cannot have
// both contracts' Describe).
type recordingKernels struct{ *recorder }

func (r recordingKernels) Describe(context.Context) (*KernelsInfo, error) {
	return cannedInfo, r.fail
}
func (r *recorder) Execute(_ context.Context, req *ExecuteRequest) (*ExecuteResponse, error) {
	r.got = append(r.got, req)
	return &ExecuteResponse{Elapsed: 42 * time.Microsecond}, r.fail
}

// grpcPair connects a host-side client to impl over go-plugin's in-process
// gRPC test connection.
func grpcPair(t testing.TB, impl *recorder) (Stager, Kernels) {
	client, server := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin{
		wire.StagerKey:  &stagerPlugin{impl: impl},
		wire.KernelsKey: &kernelsPlugin{impl: recordingKernels{impl}},
	})
	// Closing the client shuts the server down through go-plugin's
	// controller; stopping it here as well races inside go-plugin.
	_ = server
	t.Cleanup(func() { client.Close() })
	s, err := client.Dispense(wire.StagerKey)
	if err != nil {
		t.Fatal(err)
	}
	k, err := client.Dispense(wire.KernelsKey)
	if err != nil {
		t.Fatal(err)
	}
	return s.(Stager), k.(Kernels)
}

func TestWireRoundTrip(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	s, k := grpcPair(t, rec)
	openReq := &OpenRequest{
		Shards: []string{"/m/a.gguf", "/m/b.gguf"}, Budget: 55 << 30, ShmDir: "/dev/shm/k3",
		Tensors: []Tensor{
			{Name: "output.weight", Shard: 1, Offset: 96, Size: 1000, Layer: -1},
			{Name: "blk.3.ffn_up_exps.weight", Shard: 0, Offset: 1 << 36, Size: 896 * 7000, Layer: 3, Experts: 896, ExpertSize: 7000},
		},
		Options: map[string]string{"direct_io": "auto"},
	}
	hint := &HintRequest{Layer: 5, Experts: []int{1, 895, 3}, Speculative: true}
	acq := &AcquireRequest{Step: 1 << 50, Slices: []Slice{{Tensor: 1, Expert: 895}, {Tensor: 0}}, Partial: true, Wait: 1}
	exec := &ExecuteRequest{Arena: "/dev/shm/arena", Regions: cannedOpen.Regions, Threads: 8, Ops: []Op{{
		Name: "mul_mat", Weights: []WeightRef{{Region: 1, Offset: 64, Type: quant.Q2_K, Shape: []int64{7168, 3072}}},
		Inputs: []ArenaRef{{Offset: 0, Size: 28672}}, Outputs: []ArenaRef{{Offset: 28672, Size: 12288}},
		Ints: []int64{-1, 2}, Floats: []float32{0.5},
	}}}

	gotStager, err := s.Describe(ctx)
	check(t, "describe stager", err, gotStager, cannedStager)
	gotOpen, err := s.Open(ctx, openReq)
	check(t, "open", err, gotOpen, cannedOpen)
	check(t, "hint", s.Hint(ctx, hint), nil, nil)
	gotAcq, err := s.Acquire(ctx, acq)
	check(t, "acquire", err, gotAcq, cannedAcquire)
	check(t, "release", s.Release(ctx, &ReleaseRequest{Step: 9}), nil, nil)
	gotStats, err := s.Stats(ctx)
	check(t, "stats", err, gotStats, cannedStats)
	gotInfo, err := k.Describe(ctx)
	check(t, "describe", err, gotInfo, cannedInfo)
	gotExec, err := k.Execute(ctx, exec)
	check(t, "execute", err, gotExec, &ExecuteResponse{Elapsed: 42 * time.Microsecond})
	check(t, "close", s.Close(ctx), nil, nil)

	want := []any{openReq, hint, acq, &ReleaseRequest{Step: 9}, exec}
	if diff := cmp.Diff(want, rec.got); diff != "" {
		t.Errorf("requests as the plugin saw them (-sent +received):\n%s", diff)
	}
}

func check(t *testing.T, op string, err error, got, want any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", op, diff)
	}
}

// Release is deferred to the next Acquire: the plugin sees it first.
func TestReleaseRidesWithAcquire(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	s, _ := grpcPair(t, rec)
	if err := s.Release(ctx, &ReleaseRequest{Step: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, &ReleaseRequest{Step: 4}); err != nil {
		t.Fatal(err)
	}
	if len(rec.got) != 0 {
		t.Fatalf("release sent on its own: %v", rec.got)
	}
	acq := &AcquireRequest{Step: 5, Slices: []Slice{{Tensor: 1}}}
	if _, err := s.Acquire(ctx, acq); err != nil {
		t.Fatal(err)
	}
	want := []any{&ReleaseRequest{Step: 3}, &ReleaseRequest{Step: 4}, acq}
	if diff := cmp.Diff(want, rec.got); diff != "" {
		t.Errorf("plugin saw (-want +got):\n%s", diff)
	}
}

func TestWireErrors(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{fail: errors.New(`tensor "blk.0.x": shard 7 of 2`)}
	s, _ := grpcPair(t, rec)
	_, err := s.Acquire(ctx, &AcquireRequest{})
	if err == nil || err.Error() != `acquire: tensor "blk.0.x": shard 7 of 2` {
		t.Errorf("plugin error came back as %v", err)
	}
	if errors.Is(err, wire.ErrUnavailable) {
		t.Errorf("a plugin's own error reads as unavailable: %v", err)
	}
}

// BenchmarkAcquireGRPCConn is the round trip through go-plugin's gRPC over
// an in-process unix socket: the serialization and transport cost without
// process scheduling. See BenchmarkAcquire in the external tests for the
// in-process and subprocess numbers.
func BenchmarkAcquireGRPCConn(b *testing.B) {
	s, _ := grpcPair(b, &recorder{noRecord: true})
	req := benchAcquire()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Acquire(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// benchAcquire is one decode step's request for a Kimi K3 layer: 16
// experts × 3 routed tensors.
func benchAcquire() *AcquireRequest {
	req := &AcquireRequest{Step: 1}
	for e := 0; e < 16; e++ {
		for tn := 0; tn < 3; tn++ {
			req.Slices = append(req.Slices, Slice{Tensor: tn, Expert: e * 50})
		}
	}
	return req
}
