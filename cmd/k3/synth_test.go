package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
)

func TestSynthCommand(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		files int
		check func(t *testing.T, f *gguf.File)
	}{
		{"tiny default", nil, 1, func(t *testing.T, f *gguf.File) {
			if got := f.Uint("block_count", 0); got != 4 {
				t.Errorf("block_count %d", got)
			}
		}},
		{"overrides", []string{"--type", "q2_k", "--n-layer", "3", "--mla-layers", "2", "--q-lora-rank", "0",
			"--n-latent", "0", "--gate-lower-bound", "0", "--attn-res-block", "0", "--seed", "7"}, 1,
			func(t *testing.T, f *gguf.File) {
				if kv := f.Ints("attention.head_count_kv"); len(kv) != 3 || kv[2] != 1 || kv[1] != 0 {
					t.Errorf("head_count_kv %v", kv)
				}
				for _, absent := range []string{"blk.2.attn_q_a.weight", "blk.1.ffn_routed_down.weight", "output_res_score.weight"} {
					if _, ok := f.Tensor(absent); ok {
						t.Errorf("%s present", absent)
					}
				}
				if ti, ok := f.Tensor("blk.2.attn_q.weight"); !ok || ti.Type == quant.F32 {
					t.Errorf("attn_q: present %v type %s", ok, ti.Type)
				}
				if f.Has("kda.gate_lower_bound") || f.Has("attention.q_lora_rank") {
					t.Error("unset keys written")
				}
			}},
		{"split by tensors", []string{"--split-max-tensors", "30"}, 4, nil},
		{"split by size", []string{"--type", "f16", "--split-max-size", "3M"}, 4, nil},
		{"k3 shapes, tiny sizes", []string{"--preset", "k3", "--n-layer", "3", "--n-embd", "256", "--n-head", "2",
			"--kda-head-dim", "64", "--n-expert", "4", "--n-expert-used", "2", "--n-ff-exp", "64", "--n-latent", "128",
			"--n-ff", "256", "--n-vocab", "512", "--q-lora-rank", "64", "--kv-lora-rank", "64", "--qk-nope", "32",
			"--qk-rope", "16", "--v-head", "32", "--type", "q4_k_m"}, 1,
			func(t *testing.T, f *gguf.File) {
				// the k3 preset's MLA rule: every 4th layer (none of 3) plus the last
				if kv := f.Ints("attention.head_count_kv"); len(kv) != 3 || kv[2] != 1 || kv[0]+kv[1] != 0 {
					t.Errorf("head_count_kv %v", kv)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.gguf")
			var stdout, stderr bytes.Buffer
			args := append([]string{"synth", "-o", out}, tt.args...)
			if rc := runMain(args, &stdout, &stderr); rc != 0 {
				t.Fatalf("rc %d, stderr: %s", rc, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if len(lines) != tt.files+1 || !strings.Contains(lines[len(lines)-1], "GB/s") {
				t.Fatalf("output:\n%s", stdout.String())
			}
			f, err := gguf.Open(lines[0])
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(f.Paths()) != tt.files {
				t.Errorf("%d files, want %d", len(f.Paths()), tt.files)
			}
			if tt.check != nil {
				tt.check(t, f)
			}
		})
	}
}

func TestSynthCommandErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		rc   int
		want string
	}{
		{"no output", []string{"synth"}, 2, "-o FILE"},
		{"bad preset", []string{"synth", "-o", "x.gguf", "--preset", "huge"}, 1, "unknown preset"},
		{"bad type", []string{"synth", "-o", "x.gguf", "--type", "q3_k"}, 1, "unknown output type"},
		{"bad size", []string{"synth", "-o", "x.gguf", "--split-max-size", "3T"}, 1, "bad size"},
		{"invalid config", []string{"synth", "-o", "x.gguf", "--mla-layers", "0,1,2,3"}, 1, "one KDA and one MLA"},
		{"unknown flag", []string{"synth", "-o", "x.gguf", "--n-bogus", "3"}, 2, "n-bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if rc := runMain(tt.args, &stdout, &stderr); rc != tt.rc || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("rc %d, stderr %q; want rc %d and %q", rc, stderr.String(), tt.rc, tt.want)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"2G", 2_000_000_000, true},
		{"500M", 500_000_000, true},
		{"64K", 64_000, true},
		{"123", 123, true},
		{"0M", 0, false},
		{"xG", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v", tt.in, got, err)
		}
	}
}
