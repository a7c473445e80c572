package ops

import "math"

// Rotary embeddings call the C library's sinf and cosf. glibc's (2.28+,
// from ARM's optimized routines) are not correctly rounded: about 2.6% of
// rope angles get a last-bit difference from float32(math.Sin(float64(x))),
// which the tiled flash-attention kernel (float32 queries) carries into
// the logits. Sinf and Cosf are glibc's algorithms as its FMA build (what
// x86-64 CPUs with FMA run) computes them.

type sincosTab struct {
	sign               [4]float64
	hpiInv, hpi        float64
	c0, c1, c2, c3, c4 float64
	s1, s2, s3         float64
}

// sincosfTab is glibc's __sincosf_table: [1] has the cosine polynomial
// negated, for quadrants 2 and 3.
var sincosfTab = [2]sincosTab{
	{
		sign: [4]float64{1, -1, -1, 1}, hpiInv: 0x1.45F306DC9C883p+23, hpi: 0x1.921FB54442D18p0,
		c0: 0x1p0, c1: -0x1.ffffffd0c621cp-2, c2: 0x1.55553e1068f19p-5, c3: -0x1.6c087e89a359dp-10, c4: 0x1.99343027bf8c3p-16,
		s1: -0x1.555545995a603p-3, s2: 0x1.1107605230bc4p-7, s3: -0x1.994eb3774cf24p-13,
	},
	{
		sign: [4]float64{1, -1, -1, 1}, hpiInv: 0x1.45F306DC9C883p+23, hpi: 0x1.921FB54442D18p0,
		c0: -0x1p0, c1: 0x1.ffffffd0c621cp-2, c2: -0x1.55553e1068f19p-5, c3: 0x1.6c087e89a359dp-10, c4: -0x1.99343027bf8c3p-16,
		s1: -0x1.555545995a603p-3, s2: 0x1.1107605230bc4p-7, s3: -0x1.994eb3774cf24p-13,
	},
}

// invPio4 is 4/π to 192 bits, eight new bits per entry.
var invPio4 = [24]uint32{
	0xa2, 0xa2f9, 0xa2f983, 0xa2f9836e,
	0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
	0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1,
	0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
	0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599,
	0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041,
}

func abstop12(x float32) uint32 { return (math.Float32bits(x) >> 20) & 0x7ff }

// sinfPoly is the sine (n even) or cosine (n odd) polynomial of glibc's
// sinf_poly, every a+b·c fused as the FMA build computes it.
func sinfPoly(x, x2 float64, p *sincosTab, n int) float32 {
	if n&1 == 0 {
		x3 := x * x2
		s1 := math.FMA(x2, p.s3, p.s2)
		x7 := x3 * x2
		s := math.FMA(x3, p.s1, x)
		return float32(math.FMA(x7, s1, s))
	}
	x4 := x2 * x2
	c2 := math.FMA(x2, p.c4, p.c3)
	c1 := math.FMA(x2, p.c1, p.c0)
	x6 := x4 * x2
	c := math.FMA(x4, p.c2, c1)
	return float32(math.FMA(x6, c2, c))
}

// reduceFast reduces |x| < 120 to [-π/4, π/4] and its quadrant.
func reduceFast(x float64, p *sincosTab) (float64, int) {
	r := x * p.hpiInv
	n := (int32(r) + 0x800000) >> 24
	return math.FMA(-float64(n), p.hpi, x), int(n)
}

// reduceLarge reduces a float's bits (|x| >= 120) with 4/π in fixed point.
func reduceLarge(xi uint32) (float64, int) {
	arr := invPio4[(xi>>26)&15:]
	shift := (xi >> 23) & 7
	xi = (xi & 0xffffff) | 0x800000
	xi <<= shift
	res0 := uint64(xi * arr[0])
	res1 := uint64(xi) * uint64(arr[4])
	res2 := uint64(xi) * uint64(arr[8])
	res0 = (res2 >> 32) | (res0 << 32)
	res0 += res1
	n := (res0 + 1<<61) >> 62
	res0 -= n << 62
	return float64(int64(res0)) * 0x1.921FB54442D18p-62, int(n)
}

// Sinf is glibc's sinf.
func Sinf(y float32) float32 { return sincosf(y, false) }

// Cosf is glibc's cosf.
func Cosf(y float32) float32 { return sincosf(y, true) }

func sincosf(y float32, cos bool) float32 {
	x := float64(y)
	p := &sincosfTab[0]
	q := 0
	if cos {
		q = 1
	}
	switch t := abstop12(y); {
	case t < abstop12(0x1.921FB6p-1): // |y| < π/4
		if t < abstop12(0x1p-12) {
			if cos {
				return 1
			}
			return y
		}
		return sinfPoly(x, x*x, p, q)
	case t < abstop12(120):
		x, n := reduceFast(x, p)
		s := p.sign[n&3]
		if n&2 != 0 {
			p = &sincosfTab[1]
		}
		return sinfPoly(x*s, x*x, p, n^q)
	case t < abstop12(float32(math.Inf(1))):
		xi := math.Float32bits(y)
		sign := int(xi >> 31)
		x, n := reduceLarge(xi)
		s := p.sign[(n+sign)&3]
		if (n+sign)&2 != 0 {
			p = &sincosfTab[1]
		}
		return sinfPoly(x*s, x*x, p, n^q)
	}
	return float32(math.NaN())
}
