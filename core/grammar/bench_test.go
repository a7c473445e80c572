package grammar

import (
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuTime is this process's CPU time: on a shared machine the wall time
// of a benchmark mostly measures the other processes.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bigVocab is a 163840-token stand-in for Kimi K3's vocabulary: the 256
// bytes, then words, word pieces with and without a leading space,
// punctuation runs, digit groups and CJK pieces, drawn with a fixed seed.
func bigVocab() *Vocab {
	rng := rand.New(rand.NewPCG(3, 4))
	seen := map[string]bool{}
	var pieces []string
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			pieces = append(pieces, s)
		}
	}
	for b := range 256 {
		add(string([]byte{byte(b)}))
	}
	letters := "etaoinshrdlcumwfgypbvkjxqz"
	for len(pieces) < 163840-256 {
		var b strings.Builder
		switch r := rng.IntN(20); {
		case r < 12:
			if rng.IntN(2) == 0 {
				b.WriteByte(' ')
			}
			for n := 1 + rng.IntN(9); n > 0; n-- {
				b.WriteByte(letters[min(rng.IntN(26), rng.IntN(26))])
			}
		case r < 14:
			for n := 1 + rng.IntN(3); n > 0; n-- {
				p := "{}[]\",:.;!?()-_\n "
				b.WriteByte(p[rng.IntN(len(p))])
			}
		case r < 16:
			for n := 1 + rng.IntN(3); n > 0; n-- {
				b.WriteByte(byte('0' + rng.IntN(10)))
			}
		default:
			for n := 1 + rng.IntN(3); n > 0; n-- {
				b.WriteRune(rune(0x4E00 + rng.IntN(0x5000)))
			}
		}
		add(b.String())
	}
	for len(pieces) < 163840 {
		add("<|reserved_" + strings.Repeat("x", len(pieces)%7) + string(rune('a'+len(pieces)%26)) + "|>" + string(rune(len(pieces))))
	}
	return NewVocab(pieces, []int32{163839})
}

var benchVocab *Vocab

// BenchmarkMask is the time to compute one token mask over a 160k
// vocabulary for a JSON-schema grammar at states that were not seen
// before (fresh matcher each time: no cached masks or transitions), inside
// a string, between object members and inside a number.
func BenchmarkMask(b *testing.B) {
	if benchVocab == nil {
		benchVocab = bigVocab()
	}
	src, err := FromJSONSchema([]byte(schemaCases[0].schema))
	if err != nil {
		b.Fatal(err)
	}
	g := mustParse(b, src)
	for _, at := range []struct{ name, prefix string }{
		{"start", ``},
		{"in-string", `{"name": "Jo`},
		{"after-member", `{"name": "Jo", "age": 31, "address": {"city": "x"}`},
		{"in-number", `{"name": "Jo", "age": 3`},
	} {
		b.Run(at.name, func(b *testing.B) {
			logits := make([]float32, benchVocab.Size())
			var cpu time.Duration
			for b.Loop() {
				m := NewMatcher(g, benchVocab)
				if err := m.AcceptString(at.prefix); err != nil {
					b.Fatal(err)
				}
				c0 := cpuTime()
				m.Mask(logits)
				cpu += cpuTime() - c0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/mask")
		})
	}
	// The cached case: the state repeats (text inside a string).
	b.Run("in-string-cached", func(b *testing.B) {
		m := NewMatcher(g, benchVocab)
		_ = m.AcceptString(`{"name": "J`)
		logits := make([]float32, benchVocab.Size())
		m.Mask(logits)
		for b.Loop() {
			m.Mask(logits)
		}
	})
}
