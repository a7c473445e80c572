package plugin

import (
	"fmt"
	"time"

	"github.com/k3-inference/k3/core/plugin/internal/pb"
	"github.com/k3-inference/k3/core/quant"
)

// The fromproto* functions turn wire messages back into the public types,
// rejecting messages whose parallel arrays disagree.

func fromprotoOpenRequest(r *pb.OpenRequest) *OpenRequest {
	out := &OpenRequest{Shards: r.GetShards(), Budget: r.GetBudget(), ShmDir: r.GetShmDir(), Options: r.GetOptions()}
	out.Tensors = make([]Tensor, len(r.GetTensors()))
	for i, t := range r.GetTensors() {
		out.Tensors[i] = Tensor{
			Name: t.GetName(), Shard: int(t.GetShard()), Offset: t.GetOffset(), Size: t.GetSize(),
			Layer: int(t.GetLayer()), Experts: int(t.GetExperts()), ExpertSize: t.GetExpertSize(),
		}
	}
	return out
}

func fromprotoRegions(rs []*pb.Region) []Region {
	out := make([]Region, len(rs))
	for i, r := range rs {
		out[i] = Region{Kind: RegionKind(r.GetKind()), Path: r.GetPath(), Size: r.GetSize()}
	}
	return out
}

func fromprotoOpenResponse(r *pb.OpenResponse) *OpenResponse {
	return &OpenResponse{Regions: fromprotoRegions(r.GetRegions()), Mode: r.GetMode()}
}

func fromprotoHintRequest(r *pb.HintRequest) *HintRequest {
	return &HintRequest{Layer: int(r.GetLayer()), Experts: fromInt32s(r.GetExperts()), Speculative: r.GetSpeculative()}
}

func fromprotoAcquireRequest(r *pb.AcquireRequest) (*AcquireRequest, error) {
	if len(r.GetTensors()) != len(r.GetExperts()) {
		return nil, fmt.Errorf("acquire: %d tensors but %d experts", len(r.GetTensors()), len(r.GetExperts()))
	}
	if w := r.GetWait(); w < 0 || int(w) > len(r.GetTensors()) {
		return nil, fmt.Errorf("acquire: wait for %d of %d slices", w, len(r.GetTensors()))
	}
	out := &AcquireRequest{Step: r.GetStep(), Slices: make([]Slice, len(r.GetTensors())), Partial: r.GetPartial(), Wait: int(r.GetWait())}
	for i := range out.Slices {
		out.Slices[i] = Slice{Tensor: int(r.Tensors[i]), Expert: int(r.Experts[i])}
	}
	return out, nil
}

func fromprotoAcquireResponse(r *pb.AcquireResponse) (*AcquireResponse, error) {
	n := len(r.GetRegions())
	if len(r.GetOffsets()) != n || len(r.GetSizes()) != n {
		return nil, fmt.Errorf("acquire: response has %d regions, %d offsets, %d sizes", n, len(r.GetOffsets()), len(r.GetSizes()))
	}
	out := &AcquireResponse{Locations: make([]Location, n)}
	for i := range out.Locations {
		out.Locations[i] = Location{Region: int(r.Regions[i]), Offset: r.Offsets[i], Size: r.Sizes[i]}
	}
	for i, p := range r.GetPending() {
		if p < 0 || int(p) >= n || i > 0 && p <= r.Pending[i-1] {
			return nil, fmt.Errorf("acquire: pending slice %d of %d out of order or range", p, n)
		}
		out.Pending = append(out.Pending, int(p))
	}
	return out, nil
}

func fromprotoStats(s *pb.StatsResponse) *Stats {
	return &Stats{
		Hits: s.GetHits(), Misses: s.GetMisses(), Evictions: s.GetEvictions(), Reads: s.GetReads(),
		BytesRead: s.GetBytesRead(), ReadTime: time.Duration(s.GetReadNanos()), WaitTime: time.Duration(s.GetWaitNanos()),
		ResidentBytes: s.GetResidentBytes(), BudgetBytes: s.GetBudgetBytes(), DirectIO: s.GetDirectIo(), Mode: s.GetMode(),
		Devices: fromprotoDeviceStats(s.GetDevices()),
	}
}

func fromprotoDeviceStats(ds []*pb.DeviceStats) []DeviceStats {
	var out []DeviceStats
	for _, d := range ds {
		sh := make([]int, len(d.GetShards()))
		for i, x := range d.GetShards() {
			sh[i] = int(x)
		}
		out = append(out, DeviceStats{Name: d.GetName(), Workers: int(d.GetWorkers()), Shards: sh,
			Reads: d.GetReads(), BytesRead: d.GetBytesRead(), ReadTime: time.Duration(d.GetReadNanos())})
	}
	return out
}

func fromprotoKernelsInfo(k *pb.KernelsInfo) *KernelsInfo {
	out := &KernelsInfo{Name: k.GetName(), Ops: make([]OpSupport, len(k.GetOps())), Options: fromprotoOptionSpecs(k.GetOptions())}
	for i, o := range k.GetOps() {
		ts := make([]quant.Type, len(o.GetTypes()))
		for j, t := range o.GetTypes() {
			ts[j] = quant.Type(t)
		}
		out.Ops[i] = OpSupport{Op: o.GetOp(), Types: ts}
	}
	return out
}

func fromprotoStagerInfo(s *pb.StagerInfo) *StagerInfo {
	return &StagerInfo{Name: s.GetName(), Options: fromprotoOptionSpecs(s.GetOptions())}
}

func fromprotoOptionSpecs(ps []*pb.OptionSpec) []OptionSpec {
	if len(ps) == 0 {
		return nil
	}
	out := make([]OptionSpec, len(ps))
	for i, p := range ps {
		out[i] = OptionSpec{Name: p.GetName(), Type: OptionType(p.GetType()), Default: p.GetDefault(), Doc: p.GetDoc(), Values: p.GetValues()}
	}
	return out
}

func fromprotoExecuteRequest(r *pb.ExecuteRequest) *ExecuteRequest {
	out := &ExecuteRequest{Arena: r.GetArena(), Regions: fromprotoRegions(r.GetRegions()), Threads: int(r.GetThreads()), Ops: make([]Op, len(r.GetOps()))}
	for i, p := range r.GetOps() {
		op := Op{Name: p.GetName(), Ints: p.GetInts(), Floats: p.GetFloats()}
		for _, w := range p.GetWeights() {
			op.Weights = append(op.Weights, WeightRef{Region: int(w.GetRegion()), Offset: w.GetOffset(), Type: quant.Type(w.GetType()), Shape: w.GetShape()})
		}
		op.Inputs = fromprotoArenaRefs(p.GetInputs())
		op.Outputs = fromprotoArenaRefs(p.GetOutputs())
		out.Ops[i] = op
	}
	return out
}

func fromprotoArenaRefs(rs []*pb.ArenaRef) []ArenaRef {
	if len(rs) == 0 {
		return nil
	}
	out := make([]ArenaRef, len(rs))
	for i, r := range rs {
		out[i] = ArenaRef{Offset: r.GetOffset(), Size: r.GetSize()}
	}
	return out
}

func fromInt32s(xs []int32) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}
