package main

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"path/filepath"

	. "github.com/mmcloughlin/avo/operand"
)

// The IQ1/IQ3 kernels look their grid values up in tables that are
// core/quant's own (generated there from ggml-common.h and checked against
// the reference): asmgen reads them from core/quant's source, where
// go generate runs it (tools/asmgen), rather than holding a copy.

const coreGridFile = "../../core/quant/iqgrid_data.go"

var coreGrids map[string][]uint64

// coreGrid returns the entries of the array variable name of
// core/quant/iqgrid_data.go.
func coreGrid(name string) []uint64 {
	if coreGrids == nil {
		coreGrids = map[string][]uint64{}
		path, _ := filepath.Abs(coreGridFile)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			panic(fmt.Sprintf("asmgen: reading core/quant's grids: %v", err))
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				if len(vs.Values) != 1 {
					continue
				}
				cl, ok := vs.Values[0].(*ast.CompositeLit)
				if !ok {
					continue
				}
				var vals []uint64
				for _, e := range cl.Elts {
					lit, ok := e.(*ast.BasicLit)
					if !ok {
						panic(fmt.Sprintf("asmgen: %s: element %T is not a literal", vs.Names[0].Name, e))
					}
					v, ok := constant.Uint64Val(constant.MakeFromLiteral(lit.Value, lit.Kind, 0))
					if !ok {
						panic(fmt.Sprintf("asmgen: %s: bad literal %s", vs.Names[0].Name, lit.Value))
					}
					vals = append(vals, v)
				}
				coreGrids[vs.Names[0].Name] = vals
			}
		}
	}
	g, ok := coreGrids[name]
	if !ok {
		panic(fmt.Sprintf("asmgen: %s has no table %s", coreGridFile, name))
	}
	return g
}

// gridData returns a read-only global holding core/quant's table name,
// each entry as size little-endian bytes; want is its expected length.
// With mapByte, every byte of the entries is mapByte of it.
func gridData(name string, size, want int, mapByte ...func(byte) byte) Mem {
	g := coreGrid(name)
	if len(g) != want {
		panic(fmt.Sprintf("asmgen: %s has %d entries, want %d", name, len(g), want))
	}
	var b []byte
	sym := "grid_" + name
	for _, v := range g {
		for i := 0; i < size; i++ {
			c := byte(v >> (8 * i))
			if len(mapByte) > 0 {
				c = mapByte[0](c)
			}
			b = append(b, c)
		}
	}
	if len(mapByte) > 0 {
		// Named by what it maps 0xff, 0 and 1 (the IQ1 grid's bytes) to.
		f := mapByte[0]
		sym = fmt.Sprintf("%s_%d_%d_%d", sym, f(0xff), f(0), f(1))
	}
	return constData(sym, b)
}
