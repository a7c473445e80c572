package kernelkit

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/quant"
)

// TestExecuteForgetsTransient runs a product over a shard region twice:
// marked transient (Ints[1] = 1) none of the weight's pages is mapped in
// the plugin's mapping of the file after the batch, so a stager's eviction
// can drop them from the page cache; unmarked (or Ints[1] = 0) they stay
// mapped, as before.
func TestExecuteForgetsTransient(t *testing.T) {
	// The weight unaligned, as in a GGUF, with other bytes on either
	// side: less than a large folio (2 MiB; the page cache then holds
	// folios of 64-512 KiB, mapped page by page) or more.
	for _, margin := range []int{256 << 10, 3 << 20} {
		t.Run(fmt.Sprint("margin", margin>>10, "KiB"), func(t *testing.T) { forgetsTransient(t, margin) })
	}
}

func forgetsTransient(t *testing.T, margin int) {
	const rows, cols = 256, 1024
	k := New("kernelstest")
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, rows*cols)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	rb, err := quant.RowSize(quant.Q8_0, cols)
	if err != nil {
		t.Fatal(err)
	}
	wb := make([]byte, rb*rows)
	if err := quant.Quantize(quant.Q8_0, src, wb); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	off := margin + 7
	file := append(make([]byte, off), wb...)
	file = append(file, make([]byte, margin)...)
	path := filepath.Join(dir, "weights.bin")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	region := plugin.Region{Kind: plugin.RegionShard, Path: path, Size: int64(len(file))}

	a, err := host.CreateArena(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	in, err := a.Alloc(cols * 4)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Alloc(rows * 4)
	if err != nil {
		t.Fatal(err)
	}
	x := unsafe.Slice((*float32)(unsafe.Pointer(&a.Bytes(in)[0])), cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := unsafe.Slice((*float32)(unsafe.Pointer(&a.Bytes(out)[0])), rows)

	p := k.NewPlugin()
	// run executes the product and returns how many of the weight's pages
	// the plugin's mapping has present, of how many, and how many of the
	// whole file's.
	run := func(ints []int64) (present, pages, around int) {
		t.Helper()
		req := &plugin.ExecuteRequest{Arena: a.Path(), Regions: []plugin.Region{region}, Threads: 1, Ops: []plugin.Op{{
			Name:    OpMatMul,
			Weights: []plugin.WeightRef{{Region: 0, Offset: int64(off), Type: quant.Q8_0, Shape: []int64{cols, rows}}},
			Inputs:  []plugin.ArenaRef{in}, Outputs: []plugin.ArenaRef{out}, Ints: ints,
		}}}
		if _, err := p.Execute(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		m := p.regions[path]
		if m == nil {
			t.Fatal("the plugin did not map the region")
		}
		w, err := m.views.Bytes(plugin.Location{Region: 0, Offset: int64(off), Size: int64(len(wb))})
		if err != nil {
			t.Fatal(err)
		}
		present, pages = presentPages(t, uintptr(unsafe.Pointer(&w[0])), len(w))
		all, err := m.views.Bytes(plugin.Location{Region: 0, Offset: 0, Size: int64(len(file))})
		if err != nil {
			t.Fatal(err)
		}
		around, _ = presentPages(t, uintptr(unsafe.Pointer(&all[0])), len(all))
		return present, pages, around
	}

	if n, of, _ := run([]int64{1}); n != of {
		t.Fatalf("after a product kept mapped, %d of the weight's %d pages are mapped; want all (the check below would prove nothing)", n, of)
	}
	kept := append([]float32(nil), y...)
	// The faults of the kept product mapped pages around the weight too
	// (fault-around, whole large folios): dropped as well, or the
	// neighbouring experts' pages would stay cached.
	if n, of, around := run([]int64{1, 1}); n != 0 || around != 0 {
		t.Errorf("after a transient product, %d of the weight's %d pages and %d of the file's are still mapped by the plugin, want 0", n, of, around)
	}
	for i := range y {
		if y[i] != kept[i] {
			t.Fatalf("transient product row %d = %v, kept-mapped product gave %v", i, y[i], kept[i])
		}
	}
	if n, of, _ := run([]int64{1, 0}); n != of {
		t.Errorf("Ints[1] = 0: %d of the weight's %d pages mapped; only 1 marks a weight transient", n, of)
	}
}

// presentPages counts the pages of [addr, addr+n) that this process has
// mapped (the present bit of /proc/self/pagemap, readable unprivileged).
func presentPages(t *testing.T, addr uintptr, n int) (present, pages int) {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	ps := uintptr(os.Getpagesize())
	first, last := addr/ps, (addr+uintptr(n)-1)/ps
	buf := make([]byte, 8*(last-first+1))
	if _, err := f.ReadAt(buf, int64(first*8)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(buf); i += 8 {
		if binary.LittleEndian.Uint64(buf[i:])&(1<<63) != 0 {
			present++
		}
	}
	return present, len(buf) / 8
}

// TestExecuteDropsGoneRegions: a stager that restarted serves from new
// slot files and the host removes the dead one's; the plugin unmaps a
// region whose file is gone when a new region shows up, so its mapping does
// not hold the dead stager's memory.
func TestExecuteDropsGoneRegions(t *testing.T) {
	const rows, cols = 4, 32
	rb, err := quant.RowSize(quant.F32, cols)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := host.CreateArena(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	in, _ := a.Alloc(cols * 4)
	out, _ := a.Alloc(rows * 4)
	p := New("kernelstest").NewPlugin()
	run := func(path string) {
		t.Helper()
		if err := os.WriteFile(path, make([]byte, rb*rows), 0o600); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		req := &plugin.ExecuteRequest{Arena: a.Path(), Regions: []plugin.Region{{Kind: plugin.RegionShm, Path: path, Size: rb * rows}}, Threads: 1,
			Ops: []plugin.Op{{Name: OpMatMul, Weights: []plugin.WeightRef{{Region: 0, Type: quant.F32, Shape: []int64{cols, rows}}},
				Inputs: []plugin.ArenaRef{in}, Outputs: []plugin.ArenaRef{out}, Ints: []int64{1}}}}
		if _, err := p.Execute(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	old, kept, fresh := filepath.Join(dir, "old"), filepath.Join(dir, "kept"), filepath.Join(dir, "new")
	run(old)
	run(kept)
	os.Remove(old)
	run(fresh)
	if _, ok := p.regions[old]; ok {
		t.Error("the region of a removed file is still mapped")
	}
	if _, ok := p.regions[kept]; !ok {
		t.Error("a region whose file is there was unmapped")
	}
}
