// Command example-stager is the smallest useful third-party Stager: it
// shows what a backend has to do to plug into k3. It hands out locations
// straight in the shard files and warms the page cache with plain preads,
// with no cache or budget of its own, so it suits models that fit in RAM.
//
// Build it as its own binary and name it in a profile:
//
//	cd plugins/example-stager && go build -o example-stager .
//	# profile: stager: {name: example, path: ./example-stager, options: {warm: true}}
//
// It is a module of its own, built against the SDK as a third party
// builds it (go.mod's replace directive points at this checkout).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/k3-inference/k3/core/plugin"
)

func main() {
	// One call: go-plugin handshake, gRPC server, logs to the host.
	plugin.ServeStager(&stager{})
}

// options are what the stager takes: the host refuses a profile that sets
// anything else, and sends these (defaults filled in) in Open.
var options = []plugin.OptionSpec{
	{Name: "warm", Type: plugin.OptionBool, Default: "true",
		Doc: "read each acquired range once, so it is in the page cache before Acquire returns"},
}

type stager struct {
	mu      sync.Mutex
	req     *plugin.OpenRequest
	warm    bool
	files   []*os.File
	scratch []byte
	stats   plugin.Stats
}

// Describe declares the options.
func (s *stager) Describe(context.Context) (*plugin.StagerInfo, error) {
	return &plugin.StagerInfo{Name: "example-stager", Options: options}, nil
}

func (s *stager) Open(_ context.Context, req *plugin.OpenRequest) (*plugin.OpenResponse, error) {
	opts, err := plugin.ParseOptions(options, req.Options)
	if err != nil {
		return nil, fmt.Errorf("example-stager: %w", err)
	}
	s.warm = opts.Bool("warm")
	resp := &plugin.OpenResponse{Mode: "example (page cache, no budget)"}
	for _, p := range req.Shards {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("example-stager: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("example-stager: %w", err)
		}
		s.files = append(s.files, f)
		// Region i is shard i, so a tensor's location is its file offset.
		resp.Regions = append(resp.Regions, plugin.Region{Kind: plugin.RegionShard, Path: p, Size: st.Size()})
	}
	for _, t := range req.Tensors {
		if err := t.Validate(len(req.Shards)); err != nil {
			return nil, fmt.Errorf("example-stager: %w", err)
		}
	}
	s.req = req
	s.stats.BudgetBytes = req.Budget
	slog.Info("example stager open", "shards", len(req.Shards), "tensors", len(req.Tensors))
	return resp, nil
}

// Hint does nothing: a real stager starts reads here.
func (s *stager) Hint(context.Context, *plugin.HintRequest) error { return nil }

func (s *stager) Acquire(_ context.Context, req *plugin.AcquireRequest) (*plugin.AcquireResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.req == nil {
		return nil, errors.New("example-stager: not open")
	}
	resp := &plugin.AcquireResponse{}
	start := time.Now()
	for _, sl := range req.Slices {
		if sl.Tensor < 0 || sl.Tensor >= len(s.req.Tensors) {
			return nil, fmt.Errorf("example-stager: no tensor %d", sl.Tensor)
		}
		t := s.req.Tensors[sl.Tensor]
		loc := plugin.Location{Region: t.Shard, Offset: t.Offset, Size: t.Size}
		if t.Routed() {
			if sl.Expert < 0 || sl.Expert >= t.Experts {
				return nil, fmt.Errorf("example-stager: tensor %q has no expert %d", t.Name, sl.Expert)
			}
			loc.Offset += int64(sl.Expert) * t.ExpertSize
			loc.Size = t.ExpertSize
			s.stats.Misses++
		}
		resp.Locations = append(resp.Locations, loc)
		if !s.warm {
			continue // the host's mapping faults the pages in
		}
		// Reading the range is what makes it resident before Acquire
		// returns; the page cache keeps it for the host's mapping.
		if int64(len(s.scratch)) < loc.Size {
			s.scratch = make([]byte, loc.Size)
		}
		if _, err := s.files[t.Shard].ReadAt(s.scratch[:loc.Size], loc.Offset); err != nil {
			return nil, fmt.Errorf("example-stager: reading %s: %w", t.Name, err)
		}
		s.stats.Reads++
		s.stats.BytesRead += loc.Size
	}
	s.stats.ReadTime += time.Since(start)
	s.stats.WaitTime += time.Since(start)
	return resp, nil
}

// Release does nothing: nothing is pinned, the page cache decides.
func (s *stager) Release(context.Context, *plugin.ReleaseRequest) error { return nil }

func (s *stager) Stats(context.Context) (*plugin.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Mode = "example"
	return &st, nil
}

func (s *stager) Close(context.Context) error {
	var err error
	for _, f := range s.files {
		err = errors.Join(err, f.Close())
	}
	s.files = nil
	return err
}
