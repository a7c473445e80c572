// Package parity is k3's window on the reference: llama.cpp (release v0.4.0,
// the prebuilt CPU libraries from npm) driven through k3ref, a small C program
// of k3's own (k3ref/*.c). Tests compare k3's answers with the reference's on
// the same bytes: dequantized values, quantized blocks, dot products, GGUF
// metadata, load errors, logits, greedy tokens and tokenizations.
//
// Each call runs k3ref once as a subprocess, so this package stays pure Go
// (no cgo) and a crash in llama.cpp fails one call, not the test binary.
// Build k3ref with tools/parity/setup.sh; it prints the K3_PARITY export line.
package parity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// EnvVar names the environment variable holding the k3ref binary's path.
const EnvVar = "K3_PARITY"

// CPU variants for FromFloat, VecDot and the model options. Any other
// libggml-cpu-<name>.so name (e.g. "haswell", "zen4") or a path works too.
const (
	// Generic is libggml-cpu-x64.so: no SIMD, ggml's scalar C code.
	Generic = "generic"
	// Native is the variant ggml itself would pick for this CPU (highest score).
	Native = "native"
)

// Ref runs the reference tool.
type Ref struct {
	// Bin is the path of the k3ref binary.
	Bin string
}

// Find locates k3ref: $K3_PARITY if set, else tools/parity/build/k3ref under
// the repository root (found from the working directory or this source file).
func Find() (*Ref, error) {
	if p := os.Getenv(EnvVar); p != "" {
		if err := checkBin(p); err != nil {
			return nil, fmt.Errorf("parity: %s=%s: %w; run tools/parity/setup.sh to build it", EnvVar, p, err)
		}
		return &Ref{Bin: p}, nil
	}
	var tried []string
	for _, dir := range candidateDirs() {
		p := filepath.Join(dir, "build", "k3ref")
		if checkBin(p) == nil {
			return &Ref{Bin: p}, nil
		}
		tried = append(tried, p)
	}
	return nil, fmt.Errorf("parity: k3ref not found (tried %s); run tools/parity/setup.sh and set %s",
		strings.Join(tried, ", "), EnvVar)
}

func checkBin(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// candidateDirs lists possible tools/parity directories: one found by walking
// up from the working directory to k3's go.mod, and this file's own directory.
func candidateDirs() []string {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil &&
				bytes.Contains(b, []byte("module github.com/k3-inference/k3\n")) {
				dirs = append(dirs, filepath.Join(d, "tools", "parity"))
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dirs = append(dirs, filepath.Dir(file))
	}
	return dirs
}

// Require returns the harness, or skips the test with a message naming
// setup.sh when k3ref is not built. With CI=true it fails instead: CI must
// never pass by skipping the parity tests.
func Require(t testing.TB) *Ref {
	t.Helper()
	r, err := Find()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: the reference harness is required)", err)
		} else {
			t.Skipf("llama.cpp reference harness not available: %v", err)
		}
	}
	return r
}

// SrcEnvVar names the environment variable that may point at a llama.cpp
// source checkout of the reference release.
const SrcEnvVar = "K3_LLAMA_SRC"

// SourceDir locates the llama.cpp source of the reference release that
// setup.sh checks out (include/, ggml/include/, gguf-py/ and models/, which
// holds llama.cpp's vocabulary test files and chat templates):
// $K3_LLAMA_SRC if set, else tools/parity/llama.cpp-src.
func SourceDir() (string, error) {
	dirs := []string{os.Getenv(SrcEnvVar)}
	if dirs[0] == "" {
		dirs = dirs[:0]
		for _, d := range candidateDirs() {
			dirs = append(dirs, filepath.Join(d, "llama.cpp-src"))
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "include", "llama.h")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("parity: llama.cpp source not found in %s; run tools/parity/setup.sh or set %s",
		strings.Join(dirs, ", "), SrcEnvVar)
}

// RequireSource returns SourceDir, skipping the test when it is missing (failing with CI=true).
func RequireSource(t testing.TB) string {
	t.Helper()
	d, err := SourceDir()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: the reference source is required)", err)
		} else {
			t.Skipf("llama.cpp reference source not available: %v", err)
		}
	}
	return d
}

// Error is a k3ref failure: bad input, or llama.cpp failing on it.
type Error struct {
	Args   []string
	Exit   int    // k3ref's exit status (-1 if it did not exit normally)
	Stderr string // k3ref's message and the tail of llama.cpp's log
}

func (e *Error) Error() string {
	return fmt.Sprintf("parity: k3ref %s: exit %d: %s", strings.Join(e.Args, " "), e.Exit, strings.TrimSpace(e.Stderr))
}

// LoadError is llama.cpp refusing a model file (llama_model_load_from_file
// returned NULL). Msg is llama.cpp's log, which names the reason.
type LoadError struct {
	Model string
	Msg   string
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("parity: llama.cpp rejected %s: %s", e.Model, strings.TrimSpace(e.Msg))
}

// exitRejected is k3ref's exit status for a model llama.cpp refused to load.
const exitRejected = 3

// run executes k3ref with args and stdin and returns its stdout.
func (r *Ref) run(stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.Command(r.Bin, args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return nil, fmt.Errorf("parity: running %s: %w", r.Bin, err)
		}
		return nil, &Error{Args: args, Exit: ee.ExitCode(), Stderr: errb.String() + exitNote(ee)}
	}
	return out.Bytes(), nil
}

func exitNote(ee *exec.ExitError) string {
	if ee.ExitCode() == -1 {
		return " (" + ee.String() + ")"
	}
	return ""
}

// runJSON runs k3ref and decodes its JSON output into v.
func (r *Ref) runJSON(v any, stdin io.Reader, args ...string) error {
	out, err := r.run(stdin, args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("parity: k3ref %s: decoding output: %w", strings.Join(args, " "), err)
	}
	return nil
}
