// Package ggmltables reads the constant lookup tables of ggml's
// ggml-common.h (the IQ grids and sign tables) and writes them out as Go
// source. The generator in gen/ writes core/quant's iqgrid_data.go with it,
// and core/quant's tests parse the reference header with it to check the
// checked-in tables value for value.
package ggmltables

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Table is one GGML_TABLE_BEGIN(type, name, size) ... GGML_TABLE_END() block.
type Table struct {
	CType  string // uint8_t, uint32_t, uint64_t, int8_t, ...
	Name   string
	Values []uint64 // as unsigned bit patterns of the C type's width
}

var (
	beginRE = regexp.MustCompile(`(?m)^GGML_TABLE_BEGIN\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)`)
	// staticRE matches a C array definition such as ggml-quants.c's
	// "static const uint16_t kgrid_2bit_256[256] = {".
	staticRE = regexp.MustCompile(`(?m)^\s*static\s+const\s+(\w+)\s+(\w+)\[(\w+)\]\s*=\s*\{`)
)

// Parse returns the tables of header that are named in want, in the order of
// want. Every wanted table must appear once, with as many values as its
// declared size (a number or a #define of one in the header).
func Parse(header string, want []string) ([]Table, error) {
	return parse(header, want, beginRE, "GGML_TABLE_END()")
}

// ParseArrays is Parse for plain "static const T name[N] = { ... };" arrays
// (the kgrid_* tables inside ggml-quants.c's init functions).
func ParseArrays(source string, want []string) ([]Table, error) {
	return parse(source, want, staticRE, "}")
}

func parse(header string, want []string, begin *regexp.Regexp, endMark string) ([]Table, error) {
	defines := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define\s+(\w+)\s+(\d+)\s*$`).FindAllStringSubmatch(header, -1) {
		n, _ := strconv.Atoi(m[2])
		defines[m[1]] = n
	}
	found := map[string]Table{}
	for _, loc := range begin.FindAllStringSubmatchIndex(header, -1) {
		ctype, name, size := header[loc[2]:loc[3]], header[loc[4]:loc[5]], header[loc[6]:loc[7]]
		if !contains(want, name) {
			continue
		}
		if _, dup := found[name]; dup {
			return nil, fmt.Errorf("ggmltables: table %s defined twice", name)
		}
		body := header[loc[1]:]
		end := strings.Index(body, endMark)
		if end < 0 {
			return nil, fmt.Errorf("ggmltables: table %s has no end (%s)", name, endMark)
		}
		n, err := strconv.Atoi(size)
		if err != nil {
			var ok bool
			if n, ok = defines[size]; !ok {
				return nil, fmt.Errorf("ggmltables: table %s: size %q is neither a number nor a #define", name, size)
			}
		}
		bits, err := typeBits(ctype)
		if err != nil {
			return nil, fmt.Errorf("ggmltables: table %s: %w", name, err)
		}
		vals, err := parseValues(body[:end], bits)
		if err != nil {
			return nil, fmt.Errorf("ggmltables: table %s: %w", name, err)
		}
		if len(vals) != n {
			return nil, fmt.Errorf("ggmltables: table %s declares %d values and lists %d", name, n, len(vals))
		}
		found[name] = Table{CType: ctype, Name: name, Values: vals}
	}
	out := make([]Table, 0, len(want))
	for _, name := range want {
		t, ok := found[name]
		if !ok {
			return nil, fmt.Errorf("ggmltables: table %s not found", name)
		}
		out = append(out, t)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func typeBits(ctype string) (int, error) {
	switch ctype {
	case "uint8_t", "int8_t":
		return 8, nil
	case "uint16_t", "int16_t":
		return 16, nil
	case "uint32_t", "int32_t":
		return 32, nil
	case "uint64_t", "int64_t":
		return 64, nil
	}
	return 0, fmt.Errorf("unsupported element type %s", ctype)
}

// parseValues reads the comma-separated integer literals of a table body
// (decimal or hex, optionally negative), skipping C comments.
func parseValues(body string, bits int) ([]uint64, error) {
	body = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`).ReplaceAllString(body, "")
	var vals []uint64
	for _, f := range strings.Split(body, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		f = strings.TrimRight(f, "uUlL")
		neg := strings.HasPrefix(f, "-")
		f = strings.TrimPrefix(f, "-")
		v, err := strconv.ParseUint(f, 0, 64)
		if err != nil {
			return nil, fmt.Errorf("bad literal %q", f)
		}
		if neg {
			v = -v
		}
		if bits < 64 {
			mask := uint64(1)<<bits - 1
			if !neg && v > mask {
				return nil, fmt.Errorf("literal %#x does not fit %d bits", v, bits)
			}
			v &= mask
		}
		vals = append(vals, v)
	}
	return vals, nil
}

// GoType is the Go element type of a C table type.
func GoType(ctype string) string { return strings.TrimSuffix(ctype, "_t") }

// GoName is the Go identifier of a table: iq2xxs_grid -> iq2xxsGrid.
func GoName(c string) string {
	parts := strings.Split(c, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// Format writes tables as a gofmt'ed Go file of package pkg, each as an array
// variable named GoName(table.Name), hex for 32- and 64-bit tables.
func Format(pkg, source string, tables []Table) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by core/quant/internal/ggmltables/gen from %s; DO NOT EDIT.\n\n", source)
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	for _, t := range tables {
		bits, err := typeBits(t.CType)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "// %s is ggml's %s.\n", GoName(t.Name), t.Name)
		fmt.Fprintf(&b, "var %s = [%d]%s{\n", GoName(t.Name), len(t.Values), GoType(t.CType))
		per := map[int]int{8: 16, 16: 16, 32: 8, 64: 4}[bits]
		for i, v := range t.Values {
			if i%per == 0 {
				b.WriteString("\t")
			}
			b.WriteString(literal(v, bits, strings.HasPrefix(t.CType, "int")))
			b.WriteString(",")
			if i%per == per-1 || i == len(t.Values)-1 {
				b.WriteString("\n")
			} else {
				b.WriteString(" ")
			}
		}
		b.WriteString("}\n\n")
	}
	return format.Source(b.Bytes())
}

func literal(v uint64, bits int, signed bool) string {
	if signed {
		s := int64(v<<(64-bits)) >> (64 - bits)
		return strconv.FormatInt(s, 10)
	}
	if bits >= 32 {
		return fmt.Sprintf("0x%0*x", bits/4, v)
	}
	return strconv.FormatUint(v, 10)
}

// IQTables are the tables core/quant's grid-based IQ types read.
var IQTables = []string{"kmask_iq2xs", "ksigns_iq2xs", "iq2xxs_grid", "iq2xs_grid", "iq2s_grid",
	"iq3xxs_grid", "iq3s_grid", "iq1s_grid"}

// HeaderPath is ggml-common.h's path inside a llama.cpp checkout, and
// QuantsPath ggml-quants.c's (which holds the quantizers' kgrid_* tables).
const (
	HeaderPath = "ggml/src/ggml-common.h"
	QuantsPath = "ggml/src/ggml-quants.c"
)

// KGridTables are the quantizers' lattice tables of the grid IQ types.
var KGridTables = []string{"kgrid_2bit_256", "kgrid_2bit_512", "kgrid_2bit_1024", "kgrid_1bit_2048",
	"kgrid_256", "kgrid_512"}

// ReadHeader returns ggml-common.h from the llama.cpp checkout srcDir (see
// ReadSource).
func ReadHeader(srcDir string) (text, origin string, err error) {
	return ReadSource(srcDir, HeaderPath)
}

// ReadSource returns the file at path in the llama.cpp checkout srcDir:
// the file itself, or, in a sparse checkout without ggml/src (what
// tools/parity/setup.sh makes), the committed file through git show.
// origin says which.
func ReadSource(srcDir, path string) (text, origin string, err error) {
	p := filepath.Join(srcDir, path)
	if b, err := os.ReadFile(p); err == nil {
		return string(b), p, nil
	}
	cmd := exec.Command("git", "-C", srcDir, "show", "HEAD:"+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, gerr := cmd.Output()
	if gerr != nil {
		return "", "", fmt.Errorf("ggmltables: %s is not in %s, and git show failed: %v %s", path, srcDir, gerr, strings.TrimSpace(stderr.String()))
	}
	return string(out), "git show HEAD:" + path + " in " + srcDir, nil
}
