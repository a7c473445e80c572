package chat

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/kimi-k3")

// kimiK3 is the chat template of the Kimi K3 GGUF (tokenizer.chat_template),
// as published with llama.cpp's models/templates.
func kimiK3(t testing.TB) *Template {
	t.Helper()
	src, err := os.ReadFile("testdata/kimi-k3.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := New(string(src))
	if err != nil {
		t.Fatalf("New(kimi-k3): %v", err)
	}
	return tmpl
}

func TestKimiK3Caps(t *testing.T) {
	got := kimiK3(t).Caps()
	// llama.cpp finds the same for this template: content is read as a string
	// (parts are joined), tool-call arguments are read as a mapping.
	want := Caps{StringContent: true, ObjectArguments: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("caps (-want +got):\n%s", diff)
	}
}

// TestKimiK3Golden pins the rendering of every conversation, so a change of
// engine or of the variables shows up even where node is not installed.
func TestKimiK3Golden(t *testing.T) {
	tmpl := kimiK3(t)
	for _, c := range conversations() {
		c.in.Now = fixedNow
		t.Run(c.name, func(t *testing.T) {
			got, err := tmpl.Render(c.in)
			if c.wantErr {
				if err == nil {
					t.Fatalf("rendered %q, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "kimi-k3", c.name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Fatalf("rendering differs from %s (-want +got):\n%s", path, diff)
			}
		})
	}
}

// refResult is one answer of tools/jinja-ref/render.mjs.
type refResult struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

// referenceRender renders contexts with @huggingface/jinja through node. It
// skips when node or the package is missing, and fails instead when CI=true.
func referenceRender(t *testing.T, template string, contexts []json.RawMessage) []refResult {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "tools", "jinja-ref"))
	if err != nil {
		t.Fatal(err)
	}
	missing := func(why string) {
		msg := "reference renderer unavailable: " + why + " (run: cd tools/jinja-ref && npm ci)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node not on PATH")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@huggingface", "jinja")); err != nil {
		missing("tools/jinja-ref/node_modules not installed")
	}
	req, err := json.Marshal(map[string]any{"template": template, "contexts": contexts})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join(dir, "render.mjs"))
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node render.mjs: %v\n%s", err, stderr.String())
	}
	var res []refResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("reference output: %v", err)
	}
	if len(res) != len(contexts) {
		t.Fatalf("reference answered %d contexts, sent %d", len(res), len(contexts))
	}
	return res
}

// TestKimiK3ReferenceParity renders every conversation with k3 and with
// @huggingface/jinja from the same context JSON and requires identical text.
//
// Known differences between @huggingface/jinja and llama.cpp's engine, which
// the suite stays clear of (k3 follows neither exactly here; none of them
// reaches the Kimi K3 template with well-formed requests):
//   - tojson of a float: llama.cpp prints with ostream's default (6
//     significant digits, 3.14159265 -> 3.14159); JavaScript and k3 print the
//     shortest exact form. Integral floats (3.0) print as 3 in all three.
//   - |string of a list or mapping: llama.cpp gives JSON, @huggingface/jinja
//     and k3 a Python-like repr.
//   - tojson(ensure_ascii=true): llama.cpp escapes non-ASCII; the Go engine
//     ignores the flag (its built-in filters cannot be replaced). The Kimi K3
//     template only ever passes ensure_ascii=false.
func TestKimiK3ReferenceParity(t *testing.T) {
	tmpl := kimiK3(t)
	convs := conversations()
	contexts := make([]json.RawMessage, len(convs))
	ctxErrs := make([]error, len(convs))
	for i, c := range convs {
		c.in.Now = fixedNow
		contexts[i], ctxErrs[i] = tmpl.Context(c.in)
		if ctxErrs[i] != nil {
			contexts[i] = json.RawMessage("{}") // refused before rendering: nothing to compare
		}
	}
	ref := referenceRender(t, tmpl.Source(), contexts)
	identical := 0
	for i, c := range convs {
		t.Run(c.name, func(t *testing.T) {
			if ctxErrs[i] != nil {
				if !c.wantErr {
					t.Fatalf("context: %v", ctxErrs[i])
				}
				identical++
				return
			}
			got, err := tmpl.RenderContext(contexts[i])
			r := ref[i]
			if c.wantErr {
				if err == nil || r.Error == "" {
					t.Fatalf("want both to fail: k3 err=%v, reference error=%q", err, r.Error)
				}
				identical++
				return
			}
			if err != nil {
				t.Fatalf("k3: %v", err)
			}
			if r.Text == nil {
				t.Fatalf("reference failed: %s", r.Error)
			}
			if diff := cmp.Diff(*r.Text, got); diff != "" {
				t.Fatalf("k3 differs from @huggingface/jinja (-ref +k3):\n%s", diff)
			}
			identical++
		})
	}
	t.Logf("%d/%d conversations agree with @huggingface/jinja (identical text, or both refuse)", identical, len(convs))
	if len(convs) < 12 {
		t.Fatalf("parity suite has %d conversations, want at least 12", len(convs))
	}
}

func TestNewRejectsBrokenTemplate(t *testing.T) {
	for _, src := range []string{
		"{% if x %}unclosed",
		"{{ 1 + }}",
		"{% for %}{% endfor %}",
		"{% endif %}",
	} {
		t.Run(src, func(t *testing.T) {
			if _, err := New(src); err == nil {
				t.Fatalf("New(%q) accepted a broken template", src)
			}
		})
	}
}

func TestRenderErrorsAreErrors(t *testing.T) {
	tmpl, err := New(`{{ raise_exception("nope: " + messages[0].role) }}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(Input{Messages: []Message{{Role: "user", Content: "x"}}})
	if err == nil || !strings.Contains(err.Error(), "nope: user") {
		t.Fatalf("want raise_exception's message, got %v", err)
	}
	if _, err := tmpl.RenderContext([]byte(`[1,2]`)); err == nil {
		t.Fatal("a non-object context must be an error")
	}
	if _, err := kimiK3(t).Render(Input{Messages: []Message{{Role: "assistant",
		ToolCalls: []ToolCall{call("x", "f", "{not json")}}}}); err == nil {
		t.Fatal("unparsable tool-call arguments must be an error")
	}
}

func TestExtraFilters(t *testing.T) {
	tests := []struct{ src, want string }{
		{`{{ "%s has %d items (%%)"|format(name, 3) }}`, "box has 3 items (%)"},
		{`{{ "hello wonderful world"|truncate(9, false, "...", 0) }}`, "hello..."},
		{`{{ "hello wonderful world"|truncate(9, true, "…", 0) }}`, "hello wo…"},
		{`{{ "short"|truncate(9) }}`, "short"},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			tmpl, err := New(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.RenderContext([]byte(`{"name":"box"}`))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
