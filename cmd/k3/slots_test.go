package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/synth"
)

// chatTurn is what one streamed chat request reported.
type chatTurn struct {
	reply          string
	prompt, cached int
	completion     int
	ttft, total    time.Duration
}

// streamChat posts a streamed greedy chat request and times its first
// token.
func streamChat(t *testing.T, url string, msgs []map[string]string, maxTokens int) chatTurn {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": maxTokens, "temperature": 0, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}, "ignore_eos": true})
	start := time.Now()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var r chatTurn
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Delta map[string]any `json:"delta"`
			}
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				Details          struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			}
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		for _, c := range ev.Choices {
			for k, v := range c.Delta {
				if s, ok := v.(string); !ok || s == "" || k == "role" {
					continue
				}
				if r.ttft == 0 {
					r.ttft = time.Since(start)
				}
				if k == "content" {
					r.reply += v.(string)
				}
			}
		}
		if u := ev.Usage; u != nil {
			r.prompt, r.cached, r.completion = u.PromptTokens, u.Details.CachedTokens, u.CompletionTokens
		}
	}
	r.total = time.Since(start)
	if r.ttft == 0 {
		r.ttft = r.total
	}
	return r
}

// systemPrompt is a system prompt of at least n tokens on the server's
// model.
func systemPrompt(t *testing.T, url string, n int) (string, int) {
	t.Helper()
	words := strings.Fields("You are the agent of a build system. Tools: read_file(path), write_file(path, text), run(cmd), search(query). Always plan first, then call one tool per step, check its result, and report what changed. Never invent file contents; quote exact errors.")
	var b strings.Builder
	for i := 0; ; i++ {
		b.WriteString(words[i%len(words)] + " ")
		if i%50 != 49 {
			continue
		}
		resp, err := http.Post(url+"/tokenize", "application/json", strings.NewReader(fmt.Sprintf(`{"content":%q}`, b.String())))
		if err != nil {
			t.Fatal(err)
		}
		var tk struct{ Tokens []int }
		json.NewDecoder(resp.Body).Decode(&tk)
		resp.Body.Close()
		if len(tk.Tokens) >= n {
			return b.String(), len(tk.Tokens)
		}
	}
}

// TestServeSlots: the real `k3 serve -np 2` with a prefix cache
// directory, two conversations with a 2000-token system prompt
// alternating: every turn after a conversation's first reports at least
// its previous prompt cached. After a restart on the same directory a new
// conversation's first turn reports the system prompt cached, and a
// repeated first turn gives the same greedy reply as before. TTFT and
// cached tokens per turn are logged.
func TestServeSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers and plugins")
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	cfg, _ := synth.Preset("tiny")
	cfg.Type = synth.TypeQ2_K
	if _, err := synth.Write(model, cfg, synth.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "prefix-cache")
	args := []string{"-m", model, "-c", "4096", "-t", "2", "-np", "2", "--prefix-cache-dir", cache, "--prefix-cache-mem", "256M"}
	p := startServe(t, args...)
	if !strings.Contains(p.log.String(), "slots=2 prefix-cache=256.0MiB+disk") {
		t.Errorf("the mode line does not show the slots and the prefix cache:\n%s", p.log)
	}
	sys, sysTokens := systemPrompt(t, p.url, 2000)
	t.Logf("system prompt: %d tokens", sysTokens)

	convs := [2][]map[string]string{
		{{"role": "system", "content": sys}, {"role": "user", "content": "List the files in src."}},
		{{"role": "system", "content": sys}, {"role": "user", "content": "Why does the build fail?"}},
	}
	follow := []string{"Now open the first one.", "What else?", "Summarize."}
	prev := [2]int{}
	var first chatTurn
	for round := range 3 {
		for c := range 2 {
			r := streamChat(t, p.url, convs[c], 8)
			t.Logf("conversation %c turn %d: prompt %d cached %d prefilled %d ttft %v", 'A'+c, round+1, r.prompt, r.cached, r.prompt-r.cached, r.ttft.Round(time.Millisecond))
			if round > 0 && r.cached < prev[c] {
				t.Errorf("conversation %c turn %d: cached %d < previous prompt %d", 'A'+c, round+1, r.cached, prev[c])
			}
			if round == 0 && c == 0 {
				first = r
			}
			prev[c] = r.prompt
			convs[c] = append(convs[c], map[string]string{"role": "assistant", "content": r.reply}, map[string]string{"role": "user", "content": follow[round]})
		}
	}
	var slots []map[string]any
	resp, err := http.Get(p.url + "/slots")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&slots)
	resp.Body.Close()
	if len(slots) != 2 || slots[0]["n_tokens"].(float64) < float64(sysTokens) || slots[1]["n_tokens"].(float64) < float64(sysTokens) {
		t.Errorf("/slots: %v", slots)
	}
	if code, _ := p.signalAndWait(t, syscall.SIGTERM, 1); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.log)
	}

	p = startServe(t, args...)
	c := streamChat(t, p.url, []map[string]string{{"role": "system", "content": sys}, {"role": "user", "content": "A new conversation."}}, 8)
	t.Logf("after a restart, new conversation turn 1: prompt %d cached %d prefilled %d ttft %v", c.prompt, c.cached, c.prompt-c.cached, c.ttft.Round(time.Millisecond))
	if c.cached < sysTokens {
		t.Errorf("after a restart the first turn cached %d tokens, the system prompt has %d", c.cached, sysTokens)
	}
	a := streamChat(t, p.url, []map[string]string{{"role": "system", "content": sys}, {"role": "user", "content": "List the files in src."}}, 8)
	t.Logf("after a restart, conversation A turn 1 again: prompt %d cached %d ttft %v", a.prompt, a.cached, a.ttft.Round(time.Millisecond))
	// Its prompt end is not in the cache (only a conversation's newest
	// prompt end is written, when its slot is given up or at shutdown);
	// the system prompt is.
	if a.reply != first.reply || a.cached < sysTokens {
		t.Errorf("conversation A's first turn after a restart: %q cached %d of %d, before %q", a.reply, a.cached, a.prompt, first.reply)
	}
	b := streamChat(t, p.url, convs[1], 8)
	t.Logf("after a restart, conversation B turn 4: prompt %d cached %d ttft %v", b.prompt, b.cached, b.ttft.Round(time.Millisecond))
	if b.cached < prev[1] {
		t.Errorf("conversation B's next turn after a restart cached %d, its previous prompt (written at shutdown) has %d", b.cached, prev[1])
	}
}

// TestServeSlotsThroughput measures (logs, asserts nothing on time) the
// aggregate decode tokens/s of 4 concurrent clients on -np 4 against one
// client, and checks each client's greedy tokens are those it gets alone.
// It also logs the CPU time the server and its plugins spent per token
// both ways, which other load on the machine disturbs less than the wall
// time.
func TestServeSlotsThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers and plugins")
	}
	// K3_SLOTS_MODEL measures on another model (a few-GB in-RAM synth
	// file: the measurement the issue asks for); K3_SLOTS_TOKENS sets the
	// tokens per client.
	model := os.Getenv("K3_SLOTS_MODEL")
	if model == "" {
		model = filepath.Join(t.TempDir(), "tiny.gguf")
		cfg, _ := synth.Preset("tiny")
		cfg.Type = synth.TypeQ2_K
		if _, err := synth.Write(model, cfg, synth.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n := 48
	if v, err := strconv.Atoi(os.Getenv("K3_SLOTS_TOKENS")); err == nil && v > 0 {
		n = v
	}
	p := startServe(t, "-m", model, "-c", "1024", "-t", "2", "-np", "4")
	msgs := func(i int) []map[string]string {
		return []map[string]string{{"role": "user", "content": fmt.Sprintf("Client %d asks something different.", i)}}
	}
	// A first pass warms what the timed ones use (the weights in memory,
	// each client's prompt in a slot), so neither timed pass runs cold.
	for i := range 4 {
		streamChat(t, p.url, msgs(i), 1)
	}
	alone := make([]chatTurn, 4)
	cpu0 := p.cpuSeconds()
	start := time.Now()
	var gen int
	for i := range alone {
		alone[i] = streamChat(t, p.url, msgs(i), n)
		gen += alone[i].completion
	}
	seq := time.Since(start)
	cpu1 := p.cpuSeconds()
	got := make([]chatTurn, 4)
	var wg sync.WaitGroup
	start = time.Now()
	for i := range got {
		wg.Go(func() { got[i] = streamChat(t, p.url, msgs(i), n) })
	}
	wg.Wait()
	par := time.Since(start)
	cpu2 := p.cpuSeconds()
	var pgen int
	for i := range got {
		pgen += got[i].completion
		if got[i].reply != alone[i].reply {
			t.Errorf("client %d: concurrent reply %q, alone %q", i, got[i].reply, alone[i].reply)
		}
	}
	t.Logf("4 clients one after another: %d tokens in %v (%.1f tok/s); at once: %d tokens in %v (%.1f tok/s), %.2fx",
		gen, seq.Round(time.Millisecond), float64(gen)/seq.Seconds(), pgen, par.Round(time.Millisecond), float64(pgen)/par.Seconds(),
		(float64(pgen)/par.Seconds())/(float64(gen)/seq.Seconds()))
	if cpu0 > 0 && gen > 0 && pgen > 0 {
		alonePer, oncePer := (cpu1-cpu0)/float64(gen), (cpu2-cpu1)/float64(pgen)
		t.Logf("server CPU a token: %.0f ms one after another, %.0f ms at once, %.2fx the tokens per CPU second",
			alonePer*1000, oncePer*1000, alonePer/oncePer)
	}
}
