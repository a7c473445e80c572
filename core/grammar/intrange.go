package grammar

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// numberRange is the rule for an integer schema's minimum, maximum,
// exclusiveMinimum and exclusiveMaximum; ok is false when it has none.
// Bounds on non-integer numbers are refused.
func (b *SchemaBuilder) numberRange(o *object, t, path string) (string, bool) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	any := false
	for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		v, ok := o.get(k)
		if !ok {
			continue
		}
		if t == "number" {
			fail(pointer(path, k), "%s is supported for integers only, not for type number", k)
		}
		n, isNum := v.(json.Number)
		f, err := n.Float64()
		if !isNum || err != nil || math.Abs(f) > 1e15 {
			fail(pointer(path, k), "%s must be a number within ±1e15", k)
		}
		any = true
		switch k {
		case "minimum":
			lo = max(lo, int64(math.Ceil(f)))
		case "exclusiveMinimum":
			lo = max(lo, int64(math.Floor(f))+1)
		case "maximum":
			hi = min(hi, int64(math.Floor(f)))
		case "exclusiveMaximum":
			hi = min(hi, int64(math.Ceil(f))-1)
		}
	}
	if !any {
		return "", false
	}
	if lo > hi {
		fail(path, "no integer lies between the minimum and the maximum")
	}
	var alts []string
	if lo < 0 {
		// "-" and a magnitude in [max(1, -hi), -lo]
		mlo := int64(1)
		if hi < 0 {
			mlo = -hi
		}
		mhi := int64(-1) // unbounded
		if lo != math.MinInt64 {
			mhi = -lo
		}
		alts = append(alts, `"-" (`+magnitudes(mlo, mhi)+`)`)
	}
	if hi >= 0 {
		mhi := int64(-1)
		if hi != math.MaxInt64 {
			mhi = hi
		}
		alts = append(alts, magnitudes(max(lo, 0), mhi))
	}
	return "(" + strings.Join(alts, " | ") + ")", true
}

// maxDigits bounds unbounded integers as llama.cpp's integral-part does.
const maxDigits = 16

// magnitudes matches the decimals of a..b (b < 0: no bound) without
// leading zeros.
func magnitudes(a, b int64) string {
	as := strconv.FormatInt(a, 10)
	var alts []string
	top := maxDigits
	if b >= 0 {
		top = len(strconv.FormatInt(b, 10))
	}
	for n := len(as); n <= top; n++ {
		from := as
		if n > len(as) {
			from = "1" + strings.Repeat("0", n-1)
		}
		to := strings.Repeat("9", n)
		if b >= 0 && n == top {
			to = strconv.FormatInt(b, 10)
		}
		if b < 0 && n == len(as) && n < top {
			// every longer number is in range: one alternative for them all
			alts = append(alts, sameLength(from, to), "[1-9] [0-9]{"+strconv.Itoa(n)+","+strconv.Itoa(top-1)+"}")
			break
		}
		alts = append(alts, sameLength(from, to))
	}
	return strings.Join(alts, " | ")
}

// sameLength matches the decimal strings of x..y, both of one length
// (inner digits may be zeros).
func sameLength(x, y string) string {
	if len(x) == 1 {
		return digits(x[0], y[0])
	}
	if x[0] == y[0] {
		return `"` + x[:1] + `" (` + sameLength(x[1:], y[1:]) + `)`
	}
	rest := len(x) - 1
	nines, zeros := strings.Repeat("9", rest), strings.Repeat("0", rest)
	var alts []string
	if x[1:] == zeros {
		if y[1:] == nines {
			return digits(x[0], y[0]) + " [0-9]{" + strconv.Itoa(rest) + "}"
		}
		alts = append(alts, digits(x[0], y[0]-1)+" [0-9]{"+strconv.Itoa(rest)+"}")
	} else {
		alts = append(alts, `"`+x[:1]+`" (`+sameLength(x[1:], nines)+`)`)
		if x[0]+1 <= y[0]-1 {
			alts = append(alts, digits(x[0]+1, y[0]-1)+" [0-9]{"+strconv.Itoa(rest)+"}")
		}
	}
	if y[1:] == nines {
		alts = append(alts, digits(y[0], y[0])+" [0-9]{"+strconv.Itoa(rest)+"}")
	} else {
		alts = append(alts, `"`+y[:1]+`" (`+sameLength(zeros, y[1:])+`)`)
	}
	return strings.Join(alts, " | ")
}

func digits(a, b byte) string {
	if a == b {
		return "[" + string(a) + "]"
	}
	return "[" + string(a) + "-" + string(b) + "]"
}
