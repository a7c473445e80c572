package quant_test

import (
	"os"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/core/quant/internal/ggmltables"
	"github.com/k3-inference/k3/tools/parity"
)

// TestIQGridTablesMatchHeader parses the reference release's ggml-common.h
// (from the harness's llama.cpp checkout; its sparse checkout lacks
// ggml/src, so through git) and checks that iqgrid_data.go is exactly what
// the generator makes from it: the same tables, value for value.
func TestIQGridTablesMatchHeader(t *testing.T) {
	src := parity.RequireSource(t)
	text, origin, err := ggmltables.ReadHeader(src)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	tables, err := ggmltables.Parse(text, ggmltables.IQTables)
	if err != nil {
		t.Fatal(err)
	}
	have := quant.IQGridTables()
	for _, tb := range tables {
		got, ok := have[tb.Name]
		if !ok {
			t.Errorf("%s: not in core/quant", tb.Name)
			continue
		}
		if len(got) != len(tb.Values) {
			t.Errorf("%s: %d values, header has %d", tb.Name, len(got), len(tb.Values))
			continue
		}
		bad := 0
		for i, v := range tb.Values {
			if got[i] != v {
				if bad++; bad <= 3 {
					t.Errorf("%s[%d] = %#x, header has %#x", tb.Name, i, got[i], v)
				}
			}
		}
	}
	want, err := ggmltables.Format("quant", "llama.cpp "+ggmltables.HeaderPath, tables)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("iqgrid_data.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(file) != string(want) {
		t.Errorf("iqgrid_data.go is not the generator's output for %s; run go generate ./core/quant", origin)
	}
	t.Logf("%d tables checked against %s", len(tables), origin)
}

// TestIQKGridMatchesSource checks the quantizers' lattice tables, which
// core/quant derives from the dequantization grids, against the kgrid_*
// arrays of the reference's ggml-quants.c.
func TestIQKGridMatchesSource(t *testing.T) {
	src := parity.RequireSource(t)
	text, origin, err := ggmltables.ReadSource(src, ggmltables.QuantsPath)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	header, _, err := ggmltables.ReadHeader(src) // for NGRID_IQ1S
	if err != nil {
		t.Fatal(err)
	}
	tables, err := ggmltables.ParseArrays(header+"\n"+text, ggmltables.KGridTables)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		got := quant.KGrid(tb.Name)
		if len(got) != len(tb.Values) {
			t.Errorf("%s: %d values, source has %d", tb.Name, len(got), len(tb.Values))
			continue
		}
		bad := 0
		for i, v := range tb.Values {
			if uint64(got[i]) != v {
				if bad++; bad <= 3 {
					t.Errorf("%s[%d] = %d, source has %d", tb.Name, i, got[i], v)
				}
			}
		}
	}
	t.Logf("%d kgrid tables checked against %s", len(tables), origin)
}
