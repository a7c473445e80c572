// Package plugintest builds GGUF-like shard files and checks that a Stager
// returns the bytes a direct read of the files gives. Stager
// implementations, built-in and third-party, run their tests through it.
package plugintest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/k3-inference/k3/core/plugin"
)

// Spec shapes a synthetic model.
type Spec struct {
	Shards  int
	Layers  int
	Experts int
	TopK    int
	// ExpertSizes are the per-expert byte sizes of each layer's routed
	// tensors (gate, up, down); odd sizes exercise unaligned reads.
	ExpertSizes []int64
	// ResidentSizes are the sizes of each layer's always-needed tensors.
	ResidentSizes []int64
	Seed          uint64
}

// SmallSpec is a model of a few hundred KiB: 2 shards, 4 layers of 8
// experts with top-4 routing.
var SmallSpec = Spec{
	Shards: 2, Layers: 4, Experts: 8, TopK: 4,
	ExpertSizes:   []int64{5003, 5003, 6151},
	ResidentSizes: []int64{9000, 130},
	Seed:          1,
}

// Model is a synthetic model on disk.
type Model struct {
	Spec
	// Req is the OpenRequest for the model, without a budget or ShmDir.
	Req     plugin.OpenRequest
	files   []*os.File
	routed  [][]int // tensor IDs per layer
	resided []int
}

// Build writes the shard files of s into dir, with random header bytes and
// 32-byte-aligned tensor data like a GGUF file, and tensors spread across
// shards.
func Build(t testing.TB, dir string, s Spec) *Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(s.Seed, 99))
	m := &Model{Spec: s, routed: make([][]int, s.Layers)}
	bufs := make([][]byte, s.Shards)
	for i := range bufs {
		bufs[i] = randBytes(rng, 1000+rng.IntN(3000)) // the "header"
	}
	add := func(name string, size int64, layer, experts int, expertSize int64) int {
		shard := rng.IntN(s.Shards)
		b := bufs[shard]
		for len(b)%32 != 0 {
			b = append(b, 0)
		}
		off := int64(len(b))
		bufs[shard] = append(b, randBytes(rng, int(size))...)
		m.Req.Tensors = append(m.Req.Tensors, plugin.Tensor{
			Name: name, Shard: shard, Offset: off, Size: size,
			Layer: layer, Experts: experts, ExpertSize: expertSize,
		})
		return len(m.Req.Tensors) - 1
	}
	m.resided = append(m.resided, add("token_embd.weight", 4096, -1, 0, 0))
	for l := 0; l < s.Layers; l++ {
		for i, sz := range s.ResidentSizes {
			m.resided = append(m.resided, add(fmt.Sprintf("blk.%d.resident%d.weight", l, i), sz, l, 0, 0))
		}
		for i, sz := range s.ExpertSizes {
			id := add(fmt.Sprintf("blk.%d.ffn_exps%d.weight", l, i), sz*int64(s.Experts), l, s.Experts, sz)
			m.routed[l] = append(m.routed[l], id)
		}
	}
	m.resided = append(m.resided, add("output.weight", 7001, -1, 0, 0))
	for i, b := range bufs {
		p := filepath.Join(dir, fmt.Sprintf("model-%05d-of-%05d.gguf", i+1, s.Shards))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		// Synced, so the pages are clean and a stager can drop them from
		// the page cache (dirty pages survive FADV_DONTNEED).
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		// The oracle's reads must not read ahead into pages a stager is
		// keeping out of the page cache.
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
		m.files = append(m.files, f)
		m.Req.Shards = append(m.Req.Shards, p)
	}
	return m
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// Routed are the routed tensor IDs of layer l.
func (m *Model) Routed(l int) []int { return m.routed[l] }

// Resident are the always-needed tensor IDs.
func (m *Model) Resident() []int { return m.resided }

// Want reads a slice's bytes straight from its shard file: the oracle.
func (m *Model) Want(sl plugin.Slice) ([]byte, error) {
	t := m.Req.Tensors[sl.Tensor]
	off, size := t.Offset, t.Size
	if t.Routed() {
		off, size = t.Offset+int64(sl.Expert)*t.ExpertSize, t.ExpertSize
	}
	b := make([]byte, size)
	if _, err := m.files[t.Shard].ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("reading %s: %w", t.Name, err)
	}
	return b, nil
}

// Request returns a copy of the model's OpenRequest with a budget.
func (m *Model) Request(budget int64, shmDir string, options map[string]string) *plugin.OpenRequest {
	r := m.Req
	r.Budget, r.ShmDir, r.Options = budget, shmDir, options
	return &r
}

// Trace is a routing trace: Trace[token][layer] are the experts chosen.
type Trace [][][]int

// ZipfTrace draws top-k experts per token and layer with Zipf-skewed
// popularity (exponent s), a different hot set per layer, like a real
// router: a few experts are chosen most of the time.
func ZipfTrace(seed uint64, tokens, layers, experts, k int, s float64) Trace {
	rng := rand.New(rand.NewPCG(seed, 7))
	weights := make([]float64, experts)
	var total float64
	for i := range weights {
		weights[i] = 1 / math.Pow(float64(i+1), s)
		total += weights[i]
	}
	perms := make([][]int, layers)
	for l := range perms {
		perms[l] = rng.Perm(experts)
	}
	tr := make(Trace, tokens)
	for t := range tr {
		tr[t] = make([][]int, layers)
		for l := range tr[t] {
			chosen := map[int]bool{}
			for len(chosen) < k {
				x := rng.Float64() * total
				i := 0
				for ; i < experts-1 && x >= weights[i]; i++ {
					x -= weights[i]
				}
				chosen[perms[l][i]] = true
			}
			for e := range chosen {
				tr[t][l] = append(tr[t][l], e)
			}
			sort.Ints(tr[t][l])
		}
	}
	return tr
}
