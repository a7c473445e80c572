package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/ggufreq"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/plugin/plugintest"
	"github.com/k3-inference/k3/core/synth"
)

// shardStager serves every slice from the shard files themselves and can
// be told to report a restart, as a Supervisor does after its process died.
type shardStager struct {
	plugintest.FileStager
	mu       sync.Mutex
	restart  int // Acquire calls left before one reports ErrRestarted; <0 never
	acquires int
}

func (s *shardStager) Acquire(ctx context.Context, req *plugin.AcquireRequest) (*plugin.AcquireResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquires++
	if s.restart == 0 {
		s.restart = -1
		return nil, fmt.Errorf("test: %w", host.ErrRestarted)
	}
	if s.restart > 0 {
		s.restart--
	}
	return s.FileStager.Acquire(ctx, req)
}

func openShardStaged(t *testing.T, restartAfter int) (*engine.Staged, *gguf.File, *shardStager) {
	t.Helper()
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Type = synth.TypeQ2_K
	res, err := synth.Write(filepath.Join(t.TempDir(), "k3.gguf"), cfg, synth.WriteOptions{Split: gguf.SplitOptions{MaxTensors: 40}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(res.Paths[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st := &shardStager{restart: restartAfter}
	name := "engine-test-" + t.Name()
	host.RegisterStager(name, func() plugin.Stager { return st })
	s, err := engine.OpenStaged(context.Background(), f, engine.StageOptions{Launch: host.Launch{Name: name, InProcess: true}, Budget: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, f, st
}

func TestStagedBytes(t *testing.T) {
	s, f, _ := openShardStaged(t, -1)
	routed := 0
	for _, ti := range f.Tensors() {
		want, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Routed(ti.Name) {
			if !bytes.Equal(got, want) {
				t.Errorf("%s: always-needed bytes differ", ti.Name)
			}
			continue
		}
		routed++
		if got != nil {
			t.Errorf("%s: routed tensor has TensorData", ti.Name)
		}
		n := ti.Shape[len(ti.Shape)-1]
		size := ti.Size / n
		set, err := s.AcquireExperts(0, []string{ti.Name}, []int32{int32(n - 1), 0})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(set.Bytes(0, 0), want[(n-1)*size:]) || !bytes.Equal(set.Bytes(0, 1), want[:size]) {
			t.Errorf("%s: expert bytes differ", ti.Name)
		}
		if err := set.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if routed == 0 {
		t.Fatal("no routed tensors in the model")
	}
}

func TestStagedPrecision(t *testing.T) {
	s, _, _ := openShardStaged(t, -1)
	for _, h := range []struct {
		layer       int
		experts     []int32
		speculative bool
	}{
		{1, []int32{0, 1, 2, 3}, true},
		{1, []int32{1, 3, 5}, false}, // 2 of 4 predicted were used
		{2, []int32{4, 6}, true},
		{2, []int32{6, 4}, false},    // 2 of 2
		{3, []int32{0, 1}, false},    // not predicted: not scored
		{1, []int32{0, 1, 2}, false}, // scored once per prediction
	} {
		if err := s.HintExperts(h.layer, h.experts, h.speculative); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Predicted != 6 || st.PredictedRight != 4 || st.Precision() != 4.0/6 {
		t.Errorf("predicted %d right %d precision %v, want 6, 4, 2/3", st.Predicted, st.PredictedRight, st.Precision())
	}
}

// TestStagedRestart: when an Acquire reports a restarted stager, the
// weights re-map, the model's hook runs, and the Acquire is re-issued.
func TestStagedRestart(t *testing.T) {
	s, f, fake := openShardStaged(t, 1)
	remaps := 0
	s.OnRemap(func() error { remaps++; return nil })
	var name string
	for _, ti := range f.Tensors() {
		if s.Routed(ti.Name) {
			name = ti.Name
			break
		}
	}
	for i := 0; i < 3; i++ {
		set, err := s.AcquireExperts(1, []string{name}, []int32{1})
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		ti, _ := f.Tensor(name)
		want, _ := f.TensorData(ti)
		size := ti.Size / ti.Shape[len(ti.Shape)-1]
		if !bytes.Equal(set.Bytes(0, 0), want[size:2*size]) {
			t.Errorf("acquire %d: bytes differ", i)
		}
		set.Release()
	}
	if remaps != 1 {
		t.Errorf("%d remaps, want 1", remaps)
	}
	// Open's pin, 3 expert acquires, the failed one and the re-pin.
	if fake.acquires != 6 {
		t.Errorf("%d Acquire calls, want 6", fake.acquires)
	}
}

func TestStagedMaxExperts(t *testing.T) {
	s, f, _ := openShardStaged(t, -1)
	if got := s.MaxExperts(1); got < 1 {
		t.Errorf("MaxExperts = %d", got)
	}
	// 1 GiB holds every expert of the tiny model.
	ti, _ := f.Tensor("blk.1.ffn_up_exps.weight")
	if n := int(ti.Shape[len(ti.Shape)-1]); s.MaxExperts(1) < n {
		t.Errorf("MaxExperts = %d with a budget for all %d", s.MaxExperts(1), n)
	}
}

// TestStagedGroupsByFootprint: the experts one acquire asks for are sized
// by the stager's own footprint, alignment included, so a group never
// asks for more units than the stager holds; a budget that cannot hold one
// unit beside the always-needed bytes is refused before the stager starts.
func TestStagedGroupsByFootprint(t *testing.T) {
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Type = synth.TypeQ2_K
	res, err := synth.Write(filepath.Join(t.TempDir(), "k3.gguf"), cfg, synth.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(res.Paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A stager whose unit is 1 MiB, far more than the experts' bytes.
	const unit = 1 << 20
	foot := func(req *plugin.OpenRequest, units int) (int64, error) {
		r, err := engine.PageFootprint(req, 0)
		return r + int64(units)*unit, err
	}
	req, err := ggufreq.OpenRequest(f)
	if err != nil {
		t.Fatal(err)
	}
	resident, _ := foot(req, 0)
	for _, tc := range []struct{ units, want int }{{1, 1}, {2, 1}, {8, 6}} {
		st := &shardStager{restart: -1}
		name := fmt.Sprintf("engine-test-%s-%d", t.Name(), tc.units)
		host.RegisterStager(name, func() plugin.Stager { return st })
		s, err := engine.OpenStaged(context.Background(), f, engine.StageOptions{Launch: host.Launch{Name: name, InProcess: true},
			Budget: resident + int64(tc.units)*unit, Footprint: foot})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.MaxExperts(1); got != tc.want {
			t.Errorf("%d units: MaxExperts %d, want %d", tc.units, got, tc.want)
		}
		if b := s.Budget(); b.Unit != unit || b.Resident != resident {
			t.Errorf("budget %+v: not the footprint's unit and always-needed bytes", b)
		}
		s.Close()
	}
	st := &shardStager{restart: -1}
	name := "engine-test-" + t.Name()
	host.RegisterStager(name, func() plugin.Stager { return st })
	_, err = engine.OpenStaged(context.Background(), f, engine.StageOptions{Launch: host.Launch{Name: name, InProcess: true},
		Budget: resident + unit - 1, Footprint: foot})
	var be *engine.BudgetError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "not one 1048576-byte expert unit") {
		t.Errorf("a budget under one unit: %v", err)
	}
	if st.Req != nil {
		t.Error("the stager was opened for a budget that cannot run")
	}
}
