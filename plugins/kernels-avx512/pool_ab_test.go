package kernelsavx512

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/quant"
)

// TestPoolAB compares, in one process and alternating token by token, a
// decode-like run of matrix-vector products (each over weights not in
// cache) with the rows split the way kernelkit used to (one goroutine per
// call, two fixed halves) and with kernelkit's own threading. K3_POOL_AB=1
// runs it; it only reports.
func TestPoolAB(t *testing.T) {
	if os.Getenv("K3_POOL_AB") != "1" {
		t.Skip("set K3_POOL_AB=1")
	}
	// K3_POOL_AB_ROWS picks the matrices' rows (default 4096; an MoE
	// expert's are fewer, where the cost per call weighs more).
	rows, _ := strconv.Atoi(os.Getenv("K3_POOL_AB_ROWS"))
	if rows <= 0 {
		rows = 4096
	}
	const n, tokens, threads = 4096, 40, 2
	mats := 36 * 4096 / rows
	typ := quant.Q2_K
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 256*n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	part := make([]byte, 256*int(must(quant.RowSize(typ, n))))
	if err := quant.Quantize(typ, x, part); err != nil {
		t.Fatal(err)
	}
	wrow := len(part) / 256
	w := make([]byte, 0, mats*rows*wrow)
	for len(w) < cap(w) {
		w = append(w, part[:min(len(part), cap(w)-len(w))]...)
	}
	act := make([]byte, must(quant.RowSize(typ.VecDotType(), n)))
	out := make([]float32, rows)
	old := func(m []byte) {
		half := (rows/16 + 1) / 2 * 16
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			kit.MatVec(typ, m, half, n, act, out[:half], 1)
		}()
		kit.MatVec(typ, m[half*wrow:], rows-half, n, act, out[half:], 1)
		wg.Wait()
	}
	cur := func(m []byte) { kit.MatVec(typ, m, rows, n, act, out, threads) }
	token := func(mv func([]byte)) time.Duration {
		start := time.Now()
		for i := range mats {
			kit.QuantizeActivation(typ, x[i%256*n:(i%256+1)*n], act)
			mv(w[i*rows*wrow : (i+1)*rows*wrow])
		}
		return time.Since(start)
	}
	var to, tc []time.Duration
	for range tokens {
		to = append(to, token(old))
		tc = append(tc, token(cur))
	}
	stats := func(d []time.Duration) (med, mean time.Duration) {
		var sum time.Duration
		for _, v := range d {
			sum += v
		}
		slices.Sort(d)
		return d[len(d)/2], sum / time.Duration(len(d))
	}
	om, oa := stats(to)
	cm, ca := stats(tc)
	t.Logf("per token of %d products: old median %v mean %v, new median %v mean %v (new/old speed: median %.3f, mean %.3f)",
		mats, om, oa, cm, ca, float64(om)/float64(cm), float64(oa)/float64(ca))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
