package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/server/local"
	"github.com/k3-inference/k3/core/synth"
)

var (
	archBackends   = map[string]*local.Backend{}
	archBackendsMu sync.Mutex
)

// archBackend is a tiny synthetic model of arch (its preset "tiny", with
// the family's tokenizer and chat template), written and opened once.
func archBackend(t *testing.T, arch string) *local.Backend {
	t.Helper()
	archBackendsMu.Lock()
	defer archBackendsMu.Unlock()
	if be := archBackends[arch]; be != nil {
		return be
	}
	cfg, err := synth.ArchPreset(arch, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), arch+".gguf")
	if _, err := synth.Write(path, cfg, synth.WriteOptions{}); err != nil {
		t.Fatalf("writing the tiny %s model: %v", arch, err)
	}
	be, err := local.Open(path, local.Options{Threads: 2, Context: 2048, Budget: 1 << 30})
	if err != nil {
		t.Fatalf("opening the tiny %s model: %v", arch, err)
	}
	t.Cleanup(func() {
		archBackendsMu.Lock()
		delete(archBackends, arch)
		archBackendsMu.Unlock()
	})
	archBackends[arch] = be
	return be
}

// TestChatFormatsOfArchitectures serves a qwen3moe and a deepseek2 model
// (Qwen3's and DeepSeek V3.1's templates) with replies scripted in their
// formats, and requires reasoning_content, content and tool_calls in the
// OpenAI shape, whole and streamed alike; then the random model itself,
// with a forced tool_choice, replies with the call in its format.
func TestChatFormatsOfArchitectures(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},` +
		`{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}}]`
	for _, tc := range []struct {
		arch, script, opened string
		want                 reply
	}{
		{
			arch: synth.ArchQwen3MoE,
			script: "<think>\nThe user wants the weather.\n</think>\n\nLet me check." +
				"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
				"<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"Paris events\"}}\n</tool_call>",
			opened: "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
			want: reply{Reasoning: "The user wants the weather.\n", Content: "Let me check.",
				Calls: []string{`get_weather({"city": "Paris"})`, `search({"query": "Paris events"})`}, Finish: "tool_calls"},
		},
		{
			arch: synth.ArchDeepSeek2,
			script: "The user wants the weather.</think>Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" +
				"{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"Paris events\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			opened: "<｜Assistant｜><think></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>",
			want: reply{Reasoning: "The user wants the weather.", Content: "Let me check.",
				Calls: []string{`get_weather({"city": "Paris"})`, `search({"query": "Paris events"})`}, Finish: "tool_calls"},
		},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			be := archBackend(t, tc.arch)
			var prompt string
			s := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RequestLog: io.Discard},
				scriptBackend{Backend: be, eog: true, prompt: &prompt, reply: tc.script})
			ts := httptest.NewServer(s.Handler())
			t.Cleanup(ts.Close)
			body := `{"messages":[{"role":"user","content":"Weather in Paris?"}],` + tools + `}`
			got := postChat(t, ts.URL, body)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("whole reply (-want +got):\n%s", d)
			}
			streamed, _ := streamReply(t, postStream(t, ts.URL+"/v1/chat/completions", strings.TrimSuffix(body, "}")+`,"stream":true}`), false)
			if d := cmp.Diff(got, streamed); d != "" {
				t.Errorf("streamed reply differs from the whole one (-whole +streamed):\n%s", d)
			}
			// reasoning_format "none": the reasoning stays in the content.
			none := postChat(t, ts.URL, strings.TrimSuffix(body, "}")+`,"reasoning_format":"none"}`)
			if none.Reasoning != "" || !strings.Contains(none.Content, tc.want.Reasoning) || len(none.Calls) != 2 {
				t.Errorf("reasoning_format none: %+v", none)
			}

			// The random model, forced: the prompt opens the call in the
			// format, the grammar holds the arguments to the schema.
			real := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RequestLog: io.Discard},
				promptBackend{Backend: be, prompt: &prompt})
			rs := httptest.NewServer(real.Handler())
			t.Cleanup(rs.Close)
			forced := `{"messages":[{"role":"user","content":"Weather?"}],` + tools +
				`,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"max_tokens":24,"seed":1}`
			code, _, b := (&testServer{Server: rs}).do(t, "POST", "/v1/chat/completions", forced)
			if code != 200 {
				t.Fatalf("status %d: %s", code, b)
			}
			if !strings.HasSuffix(prompt, tc.opened) {
				t.Errorf("prompt ends %q, want ...%q", prompt[max(0, len(prompt)-160):], tc.opened)
			}
			r, _ := wholeReply(t, b)
			if len(r.Calls) != 1 || !strings.HasPrefix(r.Calls[0], "get_weather(") || r.Content != "" {
				t.Errorf("forced reply %+v, want one call of get_weather: %s", r, b)
			}
		})
	}
}

// promptBackend generates with the model and keeps the last prompt's text.
type promptBackend struct {
	*local.Backend
	prompt *string
}

func (p promptBackend) Generate(ctx context.Context, req server.GenerateRequest, emit func(server.Piece) error) (server.GenerateResult, error) {
	text, err := p.Detokenize(req.Prompt)
	if err != nil {
		return server.GenerateResult{}, err
	}
	*p.prompt = text
	return p.Backend.Generate(ctx, req, emit)
}
