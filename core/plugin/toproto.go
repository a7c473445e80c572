package plugin

import (
	"github.com/k3-inference/k3/core/plugin/internal/pb"
)

// The toproto* functions turn the public request and response types into
// their wire form. They are the only code besides fromproto.go that knows
// the protobuf messages.

func toprotoOpenRequest(r *OpenRequest) *pb.OpenRequest {
	out := &pb.OpenRequest{Shards: r.Shards, Budget: r.Budget, ShmDir: r.ShmDir, Options: r.Options}
	out.Tensors = make([]*pb.Tensor, len(r.Tensors))
	for i, t := range r.Tensors {
		out.Tensors[i] = &pb.Tensor{
			Name: t.Name, Shard: int32(t.Shard), Offset: t.Offset, Size: t.Size,
			Layer: int32(t.Layer), Experts: int32(t.Experts), ExpertSize: t.ExpertSize,
		}
	}
	return out
}

func toprotoRegions(rs []Region) []*pb.Region {
	out := make([]*pb.Region, len(rs))
	for i, r := range rs {
		out[i] = &pb.Region{Kind: int32(r.Kind), Path: r.Path, Size: r.Size}
	}
	return out
}

func toprotoOpenResponse(r *OpenResponse) *pb.OpenResponse {
	return &pb.OpenResponse{Regions: toprotoRegions(r.Regions), Mode: r.Mode}
}

func toprotoHintRequest(r *HintRequest) *pb.HintRequest {
	return &pb.HintRequest{Layer: int32(r.Layer), Experts: toInt32s(r.Experts), Speculative: r.Speculative}
}

func toprotoAcquireRequest(r *AcquireRequest) *pb.AcquireRequest {
	out := &pb.AcquireRequest{Step: r.Step, Tensors: make([]int32, len(r.Slices)), Experts: make([]int32, len(r.Slices)),
		Partial: r.Partial, Wait: int32(min(max(r.Wait, 0), len(r.Slices)))}
	for i, s := range r.Slices {
		out.Tensors[i] = int32(s.Tensor)
		out.Experts[i] = int32(s.Expert)
	}
	return out
}

func toprotoAcquireResponse(r *AcquireResponse) *pb.AcquireResponse {
	n := len(r.Locations)
	out := &pb.AcquireResponse{Regions: make([]int32, n), Offsets: make([]int64, n), Sizes: make([]int64, n)}
	for i, l := range r.Locations {
		out.Regions[i], out.Offsets[i], out.Sizes[i] = int32(l.Region), l.Offset, l.Size
	}
	out.Pending = toInt32s(r.Pending)
	return out
}

func toprotoStats(s *Stats) *pb.StatsResponse {
	return &pb.StatsResponse{
		Hits: s.Hits, Misses: s.Misses, Evictions: s.Evictions, Reads: s.Reads,
		BytesRead: s.BytesRead, ReadNanos: int64(s.ReadTime), WaitNanos: int64(s.WaitTime),
		ResidentBytes: s.ResidentBytes, BudgetBytes: s.BudgetBytes, DirectIo: s.DirectIO, Mode: s.Mode,
		Devices: toprotoDeviceStats(s.Devices),
	}
}

func toprotoDeviceStats(ds []DeviceStats) []*pb.DeviceStats {
	var out []*pb.DeviceStats
	for _, d := range ds {
		out = append(out, &pb.DeviceStats{Name: d.Name, Workers: int32(d.Workers), Shards: toInt32s(d.Shards),
			Reads: d.Reads, BytesRead: d.BytesRead, ReadNanos: int64(d.ReadTime)})
	}
	return out
}

func toprotoKernelsInfo(k *KernelsInfo) *pb.KernelsInfo {
	out := &pb.KernelsInfo{Name: k.Name, Ops: make([]*pb.OpSupport, len(k.Ops)), Options: toprotoOptionSpecs(k.Options)}
	for i, o := range k.Ops {
		ts := make([]uint32, len(o.Types))
		for j, t := range o.Types {
			ts[j] = uint32(t)
		}
		out.Ops[i] = &pb.OpSupport{Op: o.Op, Types: ts}
	}
	return out
}

func toprotoStagerInfo(s *StagerInfo) *pb.StagerInfo {
	return &pb.StagerInfo{Name: s.Name, Options: toprotoOptionSpecs(s.Options)}
}

func toprotoOptionSpecs(os []OptionSpec) []*pb.OptionSpec {
	out := make([]*pb.OptionSpec, len(os))
	for i, o := range os {
		out[i] = &pb.OptionSpec{Name: o.Name, Type: int32(o.Type), Default: o.Default, Doc: o.Doc, Values: o.Values}
	}
	return out
}

func toprotoExecuteRequest(r *ExecuteRequest) *pb.ExecuteRequest {
	out := &pb.ExecuteRequest{Arena: r.Arena, Regions: toprotoRegions(r.Regions), Threads: int32(r.Threads), Ops: make([]*pb.Op, len(r.Ops))}
	for i, op := range r.Ops {
		p := &pb.Op{Name: op.Name, Ints: op.Ints, Floats: op.Floats}
		for _, w := range op.Weights {
			p.Weights = append(p.Weights, &pb.WeightRef{Region: int32(w.Region), Offset: w.Offset, Type: uint32(w.Type), Shape: w.Shape})
		}
		p.Inputs = toprotoArenaRefs(op.Inputs)
		p.Outputs = toprotoArenaRefs(op.Outputs)
		out.Ops[i] = p
	}
	return out
}

func toprotoArenaRefs(rs []ArenaRef) []*pb.ArenaRef {
	out := make([]*pb.ArenaRef, len(rs))
	for i, r := range rs {
		out[i] = &pb.ArenaRef{Offset: r.Offset, Size: r.Size}
	}
	return out
}

func toInt32s(xs []int) []int32 {
	out := make([]int32, len(xs))
	for i, x := range xs {
		out[i] = int32(x)
	}
	return out
}
