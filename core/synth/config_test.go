package synth

import (
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

func TestPresetShapes(t *testing.T) {
	tests := []struct {
		preset          string
		nLayer, nMLA    int
		nExpert, nVocab int
	}{
		{"tiny", 4, 2, 8, 1024},
		// REFERENCE.md: 93 layers, 24 MLA + 69 KDA, 896 experts, vocab 163840
		{"k3", 93, 24, 896, 163840},
	}
	for _, tt := range tests {
		t.Run(tt.preset, func(t *testing.T) {
			cfg, err := Preset(tt.preset)
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			nMLA := 0
			for il := range cfg.NLayer {
				if cfg.IsMLA(il) {
					nMLA++
				}
			}
			if cfg.NLayer != tt.nLayer || nMLA != tt.nMLA || cfg.NExpert != tt.nExpert || cfg.NVocab != tt.nVocab {
				t.Errorf("layers %d, MLA %d, experts %d, vocab %d; want %d, %d, %d, %d",
					cfg.NLayer, nMLA, cfg.NExpert, cfg.NVocab, tt.nLayer, tt.nMLA, tt.nExpert, tt.nVocab)
			}
		})
	}
	if _, err := Preset("huge"); err == nil {
		t.Error("unknown preset accepted")
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no MLA layer", func(c *Config) { c.MLAEvery = 0 }, "one KDA and one MLA"},
		{"no KDA layer", func(c *Config) { c.MLALayers = []int{0, 1, 2, 3} }, "one KDA and one MLA"},
		{"MLA layer out of range", func(c *Config) { c.MLALayers = []int{1, 9} }, "out of range"},
		{"more used than experts", func(c *Config) { c.NExpertUsed = 9 }, "n_expert_used"},
		{"too many experts", func(c *Config) { c.NExpert = 1025 }, "1024"},
		{"zero width", func(c *Config) { c.NEmbd = 0 }, "n_embd"},
		{"all dense", func(c *Config) { c.NDense = 4 }, "no MoE layer"},
		{"tiny vocab", func(c *Config) { c.NVocab = 200 }, "n_vocab"},
		{"positive gate bound", func(c *Config) { c.GateLowerBound = 1 }, "lower bound"},
		{"gating func", func(c *Config) { c.GatingFunc = 3 }, "gating"},
		{"negative latent", func(c *Config) { c.NLatent = -1 }, "n_latent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tinyConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseOutType(t *testing.T) {
	for _, name := range OutTypes() {
		typ, err := ParseOutType(strings.ToUpper(name))
		if err != nil || typ.String() != name {
			t.Errorf("ParseOutType(%q) = %v, %v", name, typ, err)
		}
	}
	if _, err := ParseOutType("q3_k_s"); err == nil {
		t.Error("q3_k_s accepted")
	}
}

// TestK3Size checks the k3 preset against the published size: 2.8T
// parameters (REFERENCE.md), and a Q2_K file near the 929 GB checkpoint.
func TestK3Size(t *testing.T) {
	cfg := k3Config()
	specs, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var params, bytes int64
	for _, s := range specs {
		n := int64(1)
		for _, d := range s.Shape {
			n *= d
		}
		params += n
		rs, err := quant.RowSize(s.Type, s.Shape[0])
		if err != nil {
			t.Fatal(err)
		}
		bytes += rs * n / s.Shape[0]
	}
	if params < 2.7e12 || params > 2.9e12 {
		t.Errorf("%d parameters, want about 2.8T", params)
	}
	if gib := float64(bytes) / (1 << 30); gib < 880 || gib > 980 {
		t.Errorf("Q2_K file of %.0f GiB, want about 929", gib)
	}
}
