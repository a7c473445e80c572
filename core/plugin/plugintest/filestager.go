package plugintest

import (
	"context"

	"github.com/k3-inference/k3/core/plugin"
)

// FileStager is the simplest correct Stager: it holds nothing and answers
// every slice with its place in the shard files themselves (regions are
// the shards). Tests use it where a stager must be present but its caching
// is not what is tested; embed it to inject faults or side effects.
type FileStager struct {
	Req *plugin.OpenRequest
}

func (s *FileStager) Open(_ context.Context, req *plugin.OpenRequest) (*plugin.OpenResponse, error) {
	s.Req = req
	resp := &plugin.OpenResponse{Mode: "shards"}
	for _, p := range req.Shards {
		resp.Regions = append(resp.Regions, plugin.Region{Kind: plugin.RegionShard, Path: p})
	}
	return resp, nil
}

func (s *FileStager) Hint(context.Context, *plugin.HintRequest) error { return nil }

// Acquire places each slice in its shard: a routed tensor's expert at its
// offset within the tensor, any other tensor whole.
func (s *FileStager) Acquire(_ context.Context, req *plugin.AcquireRequest) (*plugin.AcquireResponse, error) {
	resp := &plugin.AcquireResponse{}
	for _, sl := range req.Slices {
		t := s.Req.Tensors[sl.Tensor]
		loc := plugin.Location{Region: t.Shard, Offset: t.Offset, Size: t.Size}
		if t.Routed() {
			loc.Offset, loc.Size = t.Offset+int64(sl.Expert)*t.ExpertSize, t.ExpertSize
		}
		resp.Locations = append(resp.Locations, loc)
	}
	return resp, nil
}

func (s *FileStager) Release(context.Context, *plugin.ReleaseRequest) error { return nil }
func (s *FileStager) Stats(context.Context) (*plugin.Stats, error)          { return &plugin.Stats{}, nil }
func (s *FileStager) Close(context.Context) error                           { return nil }
