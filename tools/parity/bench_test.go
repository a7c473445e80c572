package parity

import (
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

func TestBench(t *testing.T) {
	r := Require(t)
	m := writeTinyLlama(t, false, "")
	for _, o := range []BenchOptions{
		{Threads: 2, Prompt: 8, Gen: 4, Reps: 2},
		{Threads: 1, Prompt: 5, NoGen: true, Reps: 1, NoRepack: true, NoWarmup: true, CPU: Generic, Poll: new(int)},
	} {
		res, err := r.Bench(m.path, o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		gen := o.Gen
		if o.NoGen {
			gen = 0
		}
		if res.Prompt != o.Prompt || res.Gen != gen || res.Reps != o.Reps || res.Threads != o.Threads ||
			res.Repack == o.NoRepack || res.ModelBytes == 0 || res.SystemInfo == "" || res.CPUVariant == "" {
			t.Errorf("%+v: got %+v", o, res)
		}
		if wantPoll := 50; (o.Poll != nil && res.Poll != *o.Poll) || (o.Poll == nil && res.Poll != wantPoll) {
			t.Errorf("poll %d", res.Poll)
		}
		if o.CPU == Generic && res.CPUVariant != "libggml-cpu-x64.so" {
			t.Errorf("CPU %q ran %s", o.CPU, res.CPUVariant)
		}
		if len(res.Prefill.Runs) != o.Reps || res.Prefill.Mean <= 0 {
			t.Errorf("%+v: prefill %+v", o, res.Prefill)
		}
		if want := map[bool]int{true: 0, false: o.Reps}[o.NoGen]; len(res.Decode.Runs) != want || (want > 0 && res.Decode.Mean <= 0) {
			t.Errorf("%+v: decode %+v", o, res.Decode)
		}
	}
	if _, err := r.Bench(m.path+".missing", BenchOptions{}); err == nil {
		t.Error("bench of a missing file succeeded")
	}
}

func TestMatVec(t *testing.T) {
	r := Require(t)
	types := []quant.Type{quant.Q4_K, quant.Q8_0, quant.F32}
	for _, repack := range []bool{false, true} {
		res, err := r.MatVec(types, MatVecOptions{Rows: 64, Cols: 512, Threads: 2, Seconds: 0.01, Repack: repack})
		if err != nil {
			t.Fatal(err)
		}
		if res.Rows != 64 || res.Cols != 512 || res.Threads != 2 || res.Repack != repack {
			t.Errorf("header %+v", res)
		}
		for i, x := range res.Results {
			row, _ := quant.RowSize(types[i], 512)
			if !strings.EqualFold(x.Type, types[i].String()) || x.WeightBytes != 64*row || x.Reps < 5 ||
				x.BestUS <= 0 || x.MedianUS < x.BestUS || x.GBpsBest < x.GBpsMedian || x.GBpsMedian <= 0 ||
				x.MeanUS < x.BestUS || x.GBpsMean <= 0 || x.GBpsMean > x.GBpsBest {
				t.Errorf("repack=%v %s: %+v", repack, types[i], x)
			}
			// Of these only Q4_K has an x86 repacked layout (on AVX2 and up).
			if x.Repacked && (!repack || types[i] != quant.Q4_K) {
				t.Errorf("repack=%v %s: repacked=%v", repack, types[i], x.Repacked)
			}
		}
	}
	if _, err := r.MatVec([]quant.Type{quant.Q4_K}, MatVecOptions{Cols: 100}); err == nil {
		t.Error("matvec with 100 columns of Q4_K succeeded")
	}
}
