package host_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/plugin/internal/wire"
	"github.com/k3-inference/k3/core/quant"
)

// The test binary doubles as the plugin binary: re-executed with
// K3_PLUGIN_TEST set, it serves instead of running tests.
func TestMain(m *testing.M) {
	switch os.Getenv("K3_PLUGIN_TEST") {
	case "stager":
		plugin.ServeStager(&copyStager{})
		os.Exit(0)
	case "kernels":
		plugin.ServeKernels(&axpyKernels{})
		os.Exit(0)
	case "old":
		serveOld()
		os.Exit(0)
	case "host":
		runHost()
	}
	os.Exit(m.Run())
}

func subprocess(kind string, log *slog.Logger) host.Launch {
	return host.Launch{Name: "test-" + kind, Path: os.Args[0], Env: []string{"K3_PLUGIN_TEST=" + kind}, Logger: log}
}

// copyStager is the simplest correct Stager: it copies every tensor into
// one shared-memory file at Open. It ignores the budget; the real stagers
// are tested in their own packages.
type copyStager struct {
	mu      sync.Mutex
	req     *plugin.OpenRequest
	path    string
	offsets []int64
	hits    uint64
	pinned  map[uint64]int
}

func (s *copyStager) Describe(context.Context) (*plugin.StagerInfo, error) {
	return &plugin.StagerInfo{Name: "copy"}, nil
}

func (s *copyStager) Open(_ context.Context, req *plugin.OpenRequest) (*plugin.OpenResponse, error) {
	f, err := os.CreateTemp(req.ShmDir, "copy-*")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var off int64
	s.offsets = nil
	for _, t := range req.Tensors {
		if err := t.Validate(len(req.Shards)); err != nil {
			return nil, err
		}
		b := make([]byte, t.Size)
		src, err := os.ReadFile(req.Shards[t.Shard])
		if err != nil {
			return nil, err
		}
		copy(b, src[t.Offset:])
		if _, err := f.WriteAt(b, off); err != nil {
			return nil, err
		}
		s.offsets = append(s.offsets, off)
		off += t.Size
	}
	s.req, s.path, s.pinned = req, f.Name(), map[uint64]int{}
	slog.Info("copy stager open", "tensors", len(req.Tensors), "bytes", off)
	return &plugin.OpenResponse{Regions: []plugin.Region{{Kind: plugin.RegionShm, Path: f.Name(), Size: off}}, Mode: "copy"}, nil
}

func (s *copyStager) Hint(context.Context, *plugin.HintRequest) error { return nil }

func (s *copyStager) Acquire(_ context.Context, req *plugin.AcquireRequest) (*plugin.AcquireResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &plugin.AcquireResponse{}
	for _, sl := range req.Slices {
		if sl.Tensor < 0 || sl.Tensor >= len(s.offsets) {
			return nil, fmt.Errorf("no tensor %d", sl.Tensor)
		}
		t := s.req.Tensors[sl.Tensor]
		loc := plugin.Location{Offset: s.offsets[sl.Tensor], Size: t.Size}
		if t.Routed() {
			loc.Offset += int64(sl.Expert) * t.ExpertSize
			loc.Size = t.ExpertSize
		}
		resp.Locations = append(resp.Locations, loc)
		s.hits++
	}
	s.pinned[req.Step] += len(req.Slices)
	return resp, nil
}

func (s *copyStager) Release(_ context.Context, req *plugin.ReleaseRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pinned, req.Step)
	return nil
}

func (s *copyStager) Stats(context.Context) (*plugin.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &plugin.Stats{Hits: s.hits, BudgetBytes: s.req.Budget, Mode: "copy"}, nil
}

func (s *copyStager) Close(context.Context) error { return os.Remove(s.path) }

// axpyKernels implements one op, "axpy": out = Floats[0]*in + w, over F32
// vectors in the arena and a weight region.
type axpyKernels struct {
	mu     sync.Mutex
	arenas map[string]*plugin.Arena
}

func (k *axpyKernels) Describe(context.Context) (*plugin.KernelsInfo, error) {
	return &plugin.KernelsInfo{Name: "axpy-test", Ops: []plugin.OpSupport{{Op: "axpy", Types: []quant.Type{quant.F32}}}}, nil
}

func (k *axpyKernels) arena(path string) (*plugin.Arena, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if a, ok := k.arenas[path]; ok {
		return a, nil
	}
	a, err := plugin.OpenArena(path)
	if err != nil {
		return nil, err
	}
	if k.arenas == nil {
		k.arenas = map[string]*plugin.Arena{}
	}
	k.arenas[path] = a
	return a, nil
}

func (k *axpyKernels) Execute(_ context.Context, req *plugin.ExecuteRequest) (*plugin.ExecuteResponse, error) {
	start := time.Now()
	a, err := k.arena(req.Arena)
	if err != nil {
		return nil, err
	}
	views, err := plugin.MapRegions(req.Regions)
	if err != nil {
		return nil, err
	}
	defer views.Close()
	for _, op := range req.Ops {
		if op.Name == "sleep" && len(op.Ints) == 1 {
			// Not advertised: it holds a batch open for tests that kill
			// the plugin in the middle of one.
			time.Sleep(time.Duration(op.Ints[0]) * time.Millisecond)
			continue
		}
		if op.Name != "axpy" || len(op.Inputs) != 1 || len(op.Outputs) != 1 || len(op.Weights) != 1 || len(op.Floats) != 1 {
			return nil, fmt.Errorf("bad op %+v", op)
		}
		for _, r := range []plugin.ArenaRef{op.Inputs[0], op.Outputs[0]} {
			if err := a.Check(r); err != nil {
				return nil, err
			}
		}
		w := op.Weights[0]
		wb, err := views.Bytes(plugin.Location{Region: w.Region, Offset: w.Offset, Size: w.Shape[0] * 4})
		if err != nil {
			return nil, err
		}
		in, out := a.Bytes(op.Inputs[0]), a.Bytes(op.Outputs[0])
		for i := 0; i < int(w.Shape[0]); i++ {
			x := math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
			y := math.Float32frombits(binary.LittleEndian.Uint32(wb[4*i:]))
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(op.Floats[0]*x+y))
		}
	}
	return &plugin.ExecuteResponse{Elapsed: time.Since(start)}, nil
}

// oldPlugin stands for a plugin built against an SDK of protocol
// version-1: it answers the handshake with that version (nothing after
// the handshake is reached).
type oldPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (oldPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error { return nil }
func (oldPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}

func serveOld() {
	h := wire.Handshake(plugin.ProtocolVersion)
	h.ProtocolVersion = plugin.ProtocolVersion - 1
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: h,
		Plugins:         map[string]goplugin.Plugin{"stager": oldPlugin{}},
		GRPCServer:      goplugin.DefaultGRPCServer,
	})
}
