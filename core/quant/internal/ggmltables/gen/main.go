// Command gen writes core/quant's IQ grid tables (iqgrid_data.go) from
// ggml-common.h of a llama.cpp checkout:
//
//	go run ./internal/ggmltables/gen -src /path/to/llama.cpp -o iqgrid_data.go
//
// The checkout may be the sparse one tools/parity/setup.sh makes: the header
// is then read from its git history.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/k3-inference/k3/core/quant/internal/ggmltables"
)

func main() {
	src := flag.String("src", "", "llama.cpp checkout (default $K3_LLAMA_SRC, else ../../tools/parity/llama.cpp-src)")
	out := flag.String("o", "iqgrid_data.go", "output file")
	flag.Parse()
	if *src == "" {
		*src = os.Getenv("K3_LLAMA_SRC")
	}
	if *src == "" {
		*src = "../../tools/parity/llama.cpp-src"
	}
	if err := run(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(src, out string) error {
	text, _, err := ggmltables.ReadHeader(src)
	if err != nil {
		return err
	}
	tables, err := ggmltables.Parse(text, ggmltables.IQTables)
	if err != nil {
		return err
	}
	b, err := ggmltables.Format("quant", "llama.cpp "+ggmltables.HeaderPath, tables)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
