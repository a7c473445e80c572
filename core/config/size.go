package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Size is a byte count that profiles and flags write as "55G", "512MiB",
// "1.5T" or plain bytes. Suffixes are binary (G = GiB), as memory is.
type Size int64

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// ParseSize parses a size such as "55G", "55 GiB", "1.5T" or "1048576".
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return unicode.IsLetter(r) })
	num, unit := t, ""
	if i >= 0 {
		num, unit = strings.TrimSpace(t[:i]), strings.ToLower(t[i:])
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use K, M, G, T)", s, t[i:])
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: not a number", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("size %q: negative", s)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return Size(v), nil
}

func (s Size) String() string {
	switch {
	case s >= 1<<40:
		return fmt.Sprintf("%.2fTiB", float64(s)/(1<<40))
	case s >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(s)/(1<<30))
	case s >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(s)/(1<<20))
	default:
		return fmt.Sprintf("%dB", int64(s))
	}
}
