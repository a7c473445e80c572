package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/buildinfo"
)

func TestVersion(t *testing.T) {
	var out, errs bytes.Buffer
	if code := runMain([]string{"version"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	bi := buildinfo.Get()
	for _, w := range []string{"k3 " + bi.Version + "\n", "go:      " + bi.Go + " ", "kernels: kernels-avx2 levels on this CPU: generic"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("k3 version lacks %q:\n%s", w, out.String())
		}
	}
	out.Reset()
	if code := runMain([]string{"version", "--json"}, &out, &errs); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errs.String())
	}
	var v versionJSON
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	if v.Version != bi.Version || v.Go != bi.Go || v.Arch != bi.Arch {
		t.Errorf("--json build %+v, want %+v", v.Info, bi)
	}
	for _, p := range []string{"kernels-avx2", "kernels-avx512"} {
		if l := v.Kernels[p]; len(l) == 0 || l[0] != "generic" {
			t.Errorf("%s levels %v: want generic first", p, l)
		}
	}
	// Off amd64 or with -tags noasm no assembly is compiled and every
	// plugin has only its pure-Go level; on amd64 without the tag the
	// AVX2 assembly is there (whether this CPU runs it is Levels').
	if len(v.SIMD) == 0 {
		for p, l := range v.Kernels {
			if !slices.Equal(l, []string{"generic"}) {
				t.Errorf("no SIMD compiled, yet %s offers %v", p, l)
			}
		}
	} else if bi.Arch != "amd64" || !slices.Contains(v.SIMD, "avx2") {
		t.Errorf("%s build reports SIMD %v", bi.Arch, v.SIMD)
	}
	if code := runMain([]string{"version", "extra"}, &out, &errs); code != 2 {
		t.Errorf("a stray argument: exit %d, want 2", code)
	}
}
