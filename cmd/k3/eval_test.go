package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

type evalOut struct {
	lines  []map[string]json.RawMessage
	greedy []int32
}

func runEvalArgs(t *testing.T, args ...string) evalOut {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runMain(append([]string{"eval"}, args...), &out, &errb); code != 0 {
		t.Fatalf("k3 eval %v: exit %d: %s", args, code, errb.String())
	}
	var res evalOut
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		if g, ok := m["greedy"]; ok {
			if err := json.Unmarshal(g, &res.greedy); err != nil {
				t.Fatal(err)
			}
			continue
		}
		res.lines = append(res.lines, m)
	}
	return res
}

func tinyModel(t *testing.T) (string, synth.Config) {
	t.Helper()
	c, _ := synth.Preset("tiny")
	c.NVocab = 512
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if _, err := synth.Write(path, c, synth.WriteOptions{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	return path, c
}

func TestEval(t *testing.T) {
	path, _ := tinyModel(t)
	toks := "5,17,300,2,99,42,7"
	batch := runEvalArgs(t, "-m", path, "--tokens", toks, "--full", "--top", "4", "-n", "6", "-t", "2")
	step := runEvalArgs(t, "-m", path, "--tokens", toks, "--full", "--top", "4", "-n", "6", "-t", "2", "--mode", "step")
	if len(batch.lines) != 7 || len(batch.greedy) != 6 {
		t.Fatalf("got %d lines and %d greedy tokens, want 7 and 6", len(batch.lines), len(batch.greedy))
	}
	for i, l := range batch.lines {
		var logits []float32
		var top [][2]float64
		var argmax int32
		json.Unmarshal(l["logits"], &logits)
		json.Unmarshal(l["top"], &top)
		json.Unmarshal(l["argmax"], &argmax)
		if len(logits) != 512 || len(top) != 4 {
			t.Fatalf("pos %d: %d logits, %d top", i, len(logits), len(top))
		}
		for j := range logits {
			if logits[j] > logits[argmax] {
				t.Errorf("pos %d: argmax %d is not the largest logit", i, argmax)
			}
		}
		if int32(top[0][0]) != argmax || float32(top[0][1]) != logits[argmax] || top[1][1] > top[0][1] {
			t.Errorf("pos %d: top %v disagrees with argmax %d", i, top, argmax)
		}
	}
	// under 64 tokens both modes run the same kernels, so the results are identical
	if d := cmp.Diff(batch, step, cmp.AllowUnexported(evalOut{})); d != "" {
		t.Errorf("batch and step modes differ:\n%s", d)
	}
}

func TestEvalGreedyParity(t *testing.T) {
	ref := parity.Require(t)
	path, _ := tinyModel(t)
	prompt := []int32{5, 17, 300, 2, 99, 42, 7}
	want, err := ref.Greedy(path, prompt, 16, 2)
	if err != nil {
		t.Fatal(err)
	}
	got := runEvalArgs(t, "-m", path, "--tokens", "5,17,300,2,99,42,7", "-n", "16", "-t", "2")
	if d := cmp.Diff(want, got.greedy[:len(want)]); d != "" {
		t.Errorf("greedy continuation (-llama.cpp +k3):\n%s", d)
	}
}

func TestEvalErrors(t *testing.T) {
	path, _ := tinyModel(t)
	for _, args := range [][]string{
		{"--tokens", "1,2"},
		{"-m", path},
		{"-m", path, "--tokens", "1,x"},
		{"-m", path, "--tokens", "1", "--mode", "fast"},
		{"-m", path, "--tokens", "100000"},
		{"-m", filepath.Join(t.TempDir(), "missing.gguf"), "--tokens", "1"},
	} {
		var out, errb bytes.Buffer
		if code := runMain(append([]string{"eval"}, args...), &out, &errb); code == 0 {
			t.Errorf("k3 eval %s succeeded", strings.Join(args, " "))
		}
	}
}
