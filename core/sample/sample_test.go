package sample

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// softmaxOf is the reference: probabilities of logits computed directly.
func softmaxOf(logits ...float64) []float64 {
	m := math.Inf(-1)
	for _, l := range logits {
		m = math.Max(m, l)
	}
	var sum float64
	out := make([]float64, len(logits))
	for i, l := range logits {
		out[i] = math.Exp(l - m)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

type want struct {
	ID int32
	P  float64
}

func candidates(t *testing.T, cfg Config, logits []float32, accepted ...int32) []want {
	t.Helper()
	s := New(cfg)
	for _, a := range accepted {
		s.Accept(a)
	}
	c, err := s.Candidates(logits)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]want, len(c))
	for i, x := range c {
		out[i] = want{x.ID, x.P}
	}
	return out
}

var approx = cmpopts.EquateApprox(0, 1e-6)

// TestFilteredSets checks each sampler's kept set and probabilities against
// values worked out by hand for logits [1, 2, 3, 4] (softmax: 0.0321,
// 0.0871, 0.2369, 0.6439).
func TestFilteredSets(t *testing.T) {
	logits := []float32{1, 2, 3, 4}
	p := softmaxOf(1, 2, 3, 4)
	p23 := softmaxOf(3, 4)
	p123 := softmaxOf(2, 3, 4)
	tests := []struct {
		name     string
		cfg      Config
		accepted []int32
		want     []want
	}{
		{"temperature 1 keeps all", Config{Temperature: 1},
			nil, []want{{3, p[3]}, {2, p[2]}, {1, p[1]}, {0, p[0]}}},
		{"temperature 0.5 sharpens", Config{Temperature: 0.5},
			nil, func() []want {
				q := softmaxOf(2, 4, 6, 8)
				return []want{{3, q[3]}, {2, q[2]}, {1, q[1]}, {0, q[0]}}
			}()},
		{"greedy", Config{}, nil, []want{{3, 1}}},
		{"top-k 2", Config{Temperature: 1, TopK: 2}, nil, []want{{3, p23[1]}, {2, p23[0]}}},
		{"top-k larger than vocabulary", Config{Temperature: 1, TopK: 10}, nil,
			[]want{{3, p[3]}, {2, p[2]}, {1, p[1]}, {0, p[0]}}},
		// 0.6439 < 0.7 <= 0.6439 + 0.2369
		{"top-p 0.7", Config{Temperature: 1, TopP: 0.7}, nil, []want{{3, p23[1]}, {2, p23[0]}}},
		{"top-p 0.6 keeps the best only", Config{Temperature: 1, TopP: 0.6}, nil, []want{{3, 1}}},
		{"top-p 0.6 with min-keep 3", Config{Temperature: 1, TopP: 0.6, MinKeep: 3}, nil,
			[]want{{3, p123[2]}, {2, p123[1]}, {1, p123[0]}}},
		// threshold 4 + ln 0.3 = 2.796: logits 3 and 4 pass
		{"min-p 0.3", Config{Temperature: 1, MinP: 0.3}, nil, []want{{3, p23[1]}, {2, p23[0]}}},
		// threshold 4 + ln 0.05 = 1.004: logit 1 fails
		{"min-p 0.05", Config{Temperature: 1, MinP: 0.05}, nil, []want{{3, p123[2]}, {2, p123[1]}, {1, p123[0]}}},
		{"min-p 0.9 with min-keep 2", Config{Temperature: 1, MinP: 0.9, MinKeep: 2}, nil, []want{{3, p23[1]}, {2, p23[0]}}},
		{"filters before temperature", Config{Temperature: 2, TopK: 3, MinP: 0.3}, nil,
			func() []want { q := softmaxOf(1.5, 2); return []want{{3, q[1]}, {2, q[0]}} }()},
		{"logit bias", Config{Temperature: 1, LogitBias: map[int32]float32{0: 5, 3: float32(math.Inf(-1))}}, nil,
			func() []want { q := softmaxOf(6, 2, 3); return []want{{0, q[0]}, {2, q[2]}, {1, q[1]}, {3, 0}} }()},
		{"bias changes greedy", Config{LogitBias: map[int32]float32{1: 2.5}}, nil, []want{{1, 1}}},
		// token 3 seen: 4 / 2 = 2, so token 2 (logit 3) is now the best
		{"repeat penalty positive logit", Config{RepeatPenalty: 2, PenaltyLastN: 64}, []int32{3}, []want{{2, 1}}},
		{"repeat penalty with temperature", Config{Temperature: 1, RepeatPenalty: 2, PenaltyLastN: 64}, []int32{3, 3}, func() []want {
			q := softmaxOf(1, 2, 3, 2)
			return []want{{2, q[2]}, {1, q[1]}, {3, q[3]}, {0, q[0]}}
		}()},
		// frequency 0.5 x 3 occurrences + presence 1: 3 - 1.5 - 1 = 0.5
		{"frequency and presence", Config{Temperature: 1, FrequencyPenalty: 0.5, PresencePenalty: 1, PenaltyLastN: 64},
			[]int32{2, 2, 2}, func() []want {
				q := softmaxOf(1, 2, 0.5, 4)
				return []want{{3, q[3]}, {1, q[1]}, {0, q[0]}, {2, q[2]}}
			}()},
		// window of 2: only the last two (1, 1) count; token 3 is out of it
		{"penalty window", Config{Temperature: 1, PresencePenalty: 10, PenaltyLastN: 2}, []int32{3, 1, 1},
			func() []want {
				q := softmaxOf(1, -8, 3, 4)
				return []want{{3, q[3]}, {2, q[2]}, {0, q[0]}, {1, q[1]}}
			}()},
		{"penalties off with window 0", Config{Temperature: 1, PresencePenalty: 10}, []int32{3},
			[]want{{3, p[3]}, {2, p[2]}, {1, p[1]}, {0, p[0]}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := candidates(t, tc.cfg, logits, tc.accepted...)
			if diff := cmp.Diff(tc.want, got, approx); diff != "" {
				t.Fatalf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNegativeLogitRepeatPenalty(t *testing.T) {
	// -1 * 2 = -2 (multiplied, so it gets less likely, not more)
	got := candidates(t, Config{Temperature: 1, RepeatPenalty: 2, PenaltyLastN: 8}, []float32{-1, 0}, 0)
	q := softmaxOf(-2, 0)
	if diff := cmp.Diff([]want{{1, q[1]}, {0, q[0]}}, got, approx); diff != "" {
		t.Fatal(diff)
	}
}

// TestSamplingFrequencies draws many tokens and compares the counts with the
// hand-computed distribution: each within 5 standard deviations.
func TestSamplingFrequencies(t *testing.T) {
	logits := []float32{1, 2, 3, 4, 0.5}
	tests := []struct {
		name string
		cfg  Config
		want []float64 // by token id
	}{
		{"temperature 1", Config{Temperature: 1, Seed: 1}, softmaxOf(1, 2, 3, 4, 0.5)},
		{"temperature 0.7 top-k 3", Config{Temperature: 0.7, TopK: 3, Seed: 2},
			func() []float64 {
				q := softmaxOf(2/0.7, 3/0.7, 4/0.7)
				return []float64{0, q[0], q[1], q[2], 0}
			}()},
		{"top-p 0.9 min-p 0.1", Config{Temperature: 1.5, TopP: 0.9, MinP: 0.1, Seed: 3},
			// top-p 0.9 keeps {4,3,2} (0.63+0.23+0.086 >= 0.9); min-p 0.1 keeps logits >= 4 - 2.30
			func() []float64 {
				q := softmaxOf(2/1.5, 3/1.5, 4/1.5)
				return []float64{0, q[0], q[1], q[2], 0}
			}()},
	}
	const n = 100000
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.cfg)
			counts := make([]int, len(logits))
			for range n {
				tok, err := s.Sample(logits)
				if err != nil {
					t.Fatal(err)
				}
				counts[tok]++
			}
			for id, p := range tc.want {
				got := float64(counts[id]) / n
				sigma := math.Sqrt(p * (1 - p) / n)
				if math.Abs(got-p) > 5*sigma+1e-9 {
					t.Errorf("token %d: frequency %.4f, want %.4f ± %.4f", id, got, p, 5*sigma)
				}
			}
		})
	}
}

func TestSeededReproducibility(t *testing.T) {
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i))) * 3
	}
	draw := func(seed uint64) []int32 {
		s := New(Config{Temperature: 1, TopK: 50, TopP: 0.95, MinP: 0.01, RepeatPenalty: 1.1, PenaltyLastN: 16, Seed: seed})
		var out []int32
		for range 200 {
			tok, err := s.Sample(logits)
			if err != nil {
				t.Fatal(err)
			}
			s.Accept(tok)
			out = append(out, tok)
		}
		return out
	}
	a, b := draw(42), draw(42)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("same seed, different tokens:\n%s", diff)
	}
	if cmp.Equal(a, draw(43)) {
		t.Fatal("different seeds gave the same 200 tokens")
	}
	s := New(Config{Temperature: 1, Seed: 7})
	first, _ := s.Sample(logits)
	s.Reset()
	again, _ := s.Sample(logits)
	if first != again {
		t.Fatalf("after Reset the first draw is %d, was %d", again, first)
	}
}

func TestSampleErrorsAndEdges(t *testing.T) {
	s := New(Config{Temperature: 1})
	if _, err := s.Sample(nil); err == nil {
		t.Fatal("empty logits must be an error")
	}
	nan := float32(math.NaN())
	if tok, err := New(Config{}).Sample([]float32{nan, 1, nan}); err != nil || tok != 1 {
		t.Fatalf("NaN logits: got %d, %v; want 1", tok, err)
	}
	if tok, _ := New(Config{TopK: 2}).Sample([]float32{2, 5, 5}); tok != 1 {
		t.Fatalf("greedy tie: got %d, want the lower id 1", tok)
	}
	ban := float32(math.Inf(-1))
	got := candidates(t, Config{Temperature: 1}, []float32{ban, ban})
	if diff := cmp.Diff([]want{{0, 0.5}, {1, 0.5}}, got, approx); diff != "" {
		t.Fatalf("all banned (-want +got):\n%s", diff)
	}
}

func BenchmarkSampleVocab(b *testing.B) {
	logits := make([]float32, 163840)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.37)) * 8
	}
	s := New(Config{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1, PenaltyLastN: 64, Seed: 1})
	for b.Loop() {
		tok, _ := s.Sample(logits)
		s.Accept(tok)
	}
}
