package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func tc(i int, name, args string) ToolCall {
	return ToolCall{ID: "functions." + name + ":" + string(rune('0'+i)), Type: "function",
		Function: FunctionCall{Name: name, Arguments: args}}
}

var parseCases = []struct {
	name string
	in   string
	opts ParseOptions
	want Parsed
}{
	{
		name: "reasoning_then_content",
		in:   "Let me think.<|close|>think<|sep|><|open|>response<|sep|>Hello!<|close|>response<|sep|><|close|>message<|sep|>",
		opts: ParseOptions{Thinking: true},
		want: Parsed{Reasoning: "Let me think.", Content: "Hello!"},
	},
	{
		name: "thinking_off",
		in:   "Just the answer.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>",
		want: Parsed{Content: "Just the answer."},
	},
	{
		name: "generation_prompt_included",
		in:   `<|open|>message role="assistant"<|sep|><|open|>think<|sep|>r<|close|>think<|sep|><|open|>response<|sep|>c<|close|>response<|sep|>`,
		opts: ParseOptions{Thinking: true},
		want: Parsed{Reasoning: "r", Content: "c"},
	},
	{
		name: "response_without_think_close",
		in:   "thinking...<|open|>response<|sep|>answer",
		opts: ParseOptions{Thinking: true},
		want: Parsed{Reasoning: "thinking...", Content: "answer"},
	},
	{
		name: "whitespace_between_sections_dropped",
		in:   "r<|close|>think<|sep|>\n\n<|open|>response<|sep|>c<|close|>response<|sep|>\n<|close|>message<|sep|>",
		opts: ParseOptions{Thinking: true},
		want: Parsed{Reasoning: "r", Content: "c"},
	},
	{
		name: "tool_calls_with_schema",
		in: "plan<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>" +
			`<|open|>call tool="get_weather" index="1"<|sep|>` +
			`<|open|>argument key="city" type="string"<|sep|>São "Paulo"<|close|>argument<|sep|>` +
			`<|open|>argument key="days" type="number"<|sep|>3<|close|>argument<|sep|>` +
			`<|close|>call<|sep|>` +
			`<|open|>call tool="search" index="2"<|sep|>` +
			`<|open|>argument key="query" type="string"<|sep|>1 + 1<|close|>argument<|sep|>` +
			`<|open|>argument key="filters" type="object"<|sep|>{"a": [1, null]}<|close|>argument<|sep|>` +
			`<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>`,
		opts: ParseOptions{Thinking: true, Tools: []Tool{weatherTool, searchTool}},
		want: Parsed{Reasoning: "plan", ToolCalls: []ToolCall{
			tc(0, "get_weather", `{"city":"São \"Paulo\"","days":3}`),
			tc(1, "search", `{"query":"1 + 1","filters":{"a": [1, null]}}`),
		}},
	},
	{
		name: "multiline_text_with_markup",
		in: "Step 1: x\nStep 2: y\n<|close|>think<|sep|><|open|>response<|sep|>Line one.\n\nLine <html> & a<|b, 1<2." +
			"<|close|>response<|sep|><|close|>message<|sep|>",
		opts: ParseOptions{Thinking: true},
		want: Parsed{Reasoning: "Step 1: x\nStep 2: y\n", Content: "Line one.\n\nLine <html> & a<|b, 1<2."},
	},
	{
		name: "content_and_three_calls_thinking_off",
		in: "Let me check.<|close|>response<|sep|><|open|>tools<|sep|>" +
			`<|open|>call tool="get_weather" index="1"<|sep|>` +
			`<|open|>argument key="city" type="string"<|sep|>Zürich<|close|>argument<|sep|>` +
			`<|open|>argument key="days" type="number"<|sep|>7<|close|>argument<|sep|>` +
			`<|open|>argument key="units" type="string"<|sep|>c<|close|>argument<|sep|>` +
			`<|close|>call<|sep|>` +
			`<|open|>call tool="search" index="2"<|sep|>` +
			`<|open|>argument key="limit" type="number"<|sep|>2.5<|close|>argument<|sep|>` +
			`<|open|>argument key="safe" type="boolean"<|sep|>false<|close|>argument<|sep|>` +
			`<|close|>call<|sep|>` +
			`<|open|>call tool="get_weather" index="3"<|sep|>` +
			`<|open|>argument key="city" type="string"<|sep|>line1` + "\n" + `"two"<|close|>argument<|sep|>` +
			`<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>`,
		opts: ParseOptions{Tools: []Tool{weatherTool, searchTool}},
		want: Parsed{Content: "Let me check.", ToolCalls: []ToolCall{
			tc(0, "get_weather", `{"city":"Zürich","days":7,"units":"c"}`),
			tc(1, "search", `{"limit":2.5,"safe":false}`),
			tc(2, "get_weather", `{"city":"line1\n\"two\""}`),
		}},
	},
	{
		name: "schema_string_wins_over_type_attribute",
		in:   `<|open|>tools<|sep|><|open|>call tool="search" index="1"<|sep|><|open|>argument key="query" type="number"<|sep|>42<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`,
		opts: ParseOptions{Tools: []Tool{searchTool}},
		want: Parsed{ToolCalls: []ToolCall{tc(0, "search", `{"query":"42"}`)}},
	},
	{
		name: "no_schema_uses_type_attribute",
		in: `<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|>` +
			`<|open|>argument key="n" type="number"<|sep|>2.5<|close|>argument<|sep|>` +
			`<|open|>argument key="s" type="string"<|sep|>line1` + "\n" + `tab	x\<|close|>argument<|sep|>` +
			`<|open|>argument key="bad" type="object"<|sep|>{not json<|close|>argument<|sep|>` +
			`<|close|>call<|sep|><|close|>tools<|sep|>`,
		want: Parsed{ToolCalls: []ToolCall{tc(0, "f", `{"n":2.5,"s":"line1\ntab\tx\\","bad":"{not json"}`)}},
	},
	{
		name: "json_block_and_no_arguments",
		in: `<|open|>tools<|sep|><|open|>call tool="a&amp;b &quot;x&quot;" index="1"<|sep|><|open|>json type="object"<|sep|>{"k": "v"}<|close|>json<|sep|><|close|>call<|sep|>` +
			`<|open|>call tool="ping" index="2"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`,
		want: Parsed{ToolCalls: []ToolCall{
			{ID: `functions.a&b "x":0`, Type: "function", Function: FunctionCall{Name: `a&b "x"`, Arguments: `{"k": "v"}`}},
			tc(1, "ping", `{}`),
		}},
	},
	{
		name: "truncated_inside_argument",
		in:   `answer<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="q" type="string"<|sep|>partial val`,
		want: Parsed{Content: "answer", ToolCalls: []ToolCall{tc(0, "f", `{"q":"partial val"}`)}},
	},
	{
		name: "partial_marker_at_end_dropped",
		in:   "a < b and <|clo",
		want: Parsed{Content: "a < b and "},
	},
	{
		name: "unfinished_unknown_tag_at_end_is_text",
		in:   "x <|open|>bold text",
		want: Parsed{Content: "x <|open|>bold text"},
	},
	{
		name: "unfinished_call_tag_at_end_dropped",
		in:   `ok<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_wea`,
		want: Parsed{Content: "ok"},
	},
	{
		name: "unknown_tags_and_bare_markers_are_text",
		in:   "x <|open|>bold<|sep|>y<|close|>bold<|sep|> <|open|> z <|sep|> <|foo|>",
		want: Parsed{Content: "x <|open|>bold<|sep|>y<|close|>bold<|sep|> <|open|> z <|sep|> <|foo|>"},
	},
	{
		name: "text_after_end_of_message_ignored",
		in:   "done<|end_of_msg|>more text<|open|>response<|sep|>again",
		want: Parsed{Content: "done"},
	},
	{
		name: "tools_opened_from_reasoning",
		in:   `hmm<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="a" type="boolean"<|sep|>true<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`,
		opts: ParseOptions{Thinking: true},
		want: Parsed{Reasoning: "hmm", ToolCalls: []ToolCall{tc(0, "f", `{"a":true}`)}},
	},
	{
		name: "non_ascii",
		in:   "考え中…<|close|>think<|sep|><|open|>response<|sep|>こんにちは 😀<|close|>response<|sep|>",
		opts: ParseOptions{Thinking: true},
		want: Parsed{Reasoning: "考え中…", Content: "こんにちは 😀"},
	},
}

func TestParse(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			got := Parse(c.in, c.opts)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Fatalf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// collect applies deltas the way an OpenAI streaming client does.
func collect(deltas []Delta, into *Parsed) {
	for _, d := range deltas {
		into.Reasoning += d.Reasoning
		into.Content += d.Content
		if tcd := d.ToolCall; tcd != nil {
			for len(into.ToolCalls) <= tcd.Index {
				into.ToolCalls = append(into.ToolCalls, ToolCall{Type: "function"})
			}
			c := &into.ToolCalls[tcd.Index]
			if tcd.ID != "" {
				c.ID = tcd.ID
			}
			c.Function.Name += tcd.Name
			c.Function.Arguments += tcd.Arguments
		}
	}
}

// streamChunks feeds chunks and returns the parser's result and what the
// deltas add up to.
func streamChunks(chunks []string, o ParseOptions) (result, fromDeltas Parsed) {
	p := NewParser(o)
	for _, ch := range chunks {
		collect(p.Feed(ch), &fromDeltas)
	}
	collect(p.Close(), &fromDeltas)
	return p.Result(), fromDeltas
}

func checkStream(t *testing.T, text string, chunks []string, o ParseOptions, whole Parsed) {
	t.Helper()
	res, fromDeltas := streamChunks(chunks, o)
	if diff := cmp.Diff(whole, res); diff != "" {
		t.Fatalf("chunks %q: streaming result differs from Parse (-whole +stream):\n%s", chunks, diff)
	}
	if diff := cmp.Diff(whole, fromDeltas, cmpEmpty); diff != "" {
		t.Fatalf("chunks %q: deltas do not add up to Parse (-whole +deltas):\n%s", chunks, diff)
	}
}

var cmpEmpty = cmp.Transformer("nilCalls", func(c []ToolCall) []ToolCall {
	if len(c) == 0 {
		return nil
	}
	return c
})

// TestParserStreamingEveryTwoWaySplit splits each case at every byte, and
// into single bytes: the deltas and the result must equal the whole-text
// parse.
func TestParserStreamingEveryTwoWaySplit(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			whole := Parse(c.in, c.opts)
			for i := 0; i <= len(c.in); i++ {
				checkStream(t, c.in, []string{c.in[:i], c.in[i:]}, c.opts, whole)
			}
			bytes := make([]string, len(c.in))
			for i := 0; i < len(c.in); i++ {
				bytes[i] = c.in[i : i+1]
			}
			checkStream(t, c.in, bytes, c.opts, whole)
		})
	}
}

// TestParserNeverShowsPartialMarker: while a marker arrives byte by byte, no
// piece of it may be emitted as content.
func TestParserNeverShowsPartialMarker(t *testing.T) {
	in := "Hello<|close|>response<|sep|><|open|>tools<|sep|>"
	p := NewParser(ParseOptions{})
	var content string
	for i := 0; i < len(in); i++ {
		for _, d := range p.Feed(in[i : i+1]) {
			content += d.Content
		}
		if strings.Contains(content, "<") {
			t.Fatalf("after %q content is %q", in[:i+1], content)
		}
	}
	if content != "Hello" {
		t.Fatalf("content %q, want Hello", content)
	}
}

// TestParseRoundTrip renders an assistant turn with the Kimi K3 template,
// takes what follows the generation prompt as if the model had written it,
// and parses it back into the same fields.
func TestParseRoundTrip(t *testing.T) {
	tmpl := kimiK3(t)
	user := Message{Role: "user", Content: "Weather in Paris and Tokyo?"}
	asst := Message{Role: "assistant", ReasoningContent: "Two cities → two calls.", Content: "Checking \"both\".",
		ToolCalls: []ToolCall{
			call("x", "get_weather", `{"city":"Paris","days":3}`),
			call("y", "search", `{"query":"東京 weather","filters":{"a":[1,"b"]},"safe":true}`),
		}}
	tools := []Tool{weatherTool, searchTool}
	for _, thinking := range []bool{true, false} {
		t.Run("thinking="+map[bool]string{true: "on", false: "off"}[thinking], func(t *testing.T) {
			kwargs := kw("thinking", map[bool]string{true: "true", false: "false"}[thinking])
			prompt, err := tmpl.Render(Input{Messages: []Message{user}, Tools: tools, AddGenerationPrompt: true, Kwargs: kwargs, Now: fixedNow})
			if err != nil {
				t.Fatal(err)
			}
			full, err := tmpl.Render(Input{Messages: []Message{user, asst}, Tools: tools, Kwargs: kwargs, Now: fixedNow})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(full, prompt) {
				t.Fatalf("rendered turn does not continue the generation prompt:\nprompt %q\nfull   %q", prompt, full)
			}
			got := Parse(full[len(prompt):], ParseOptions{Thinking: thinking, Tools: tools})
			want := Parsed{Content: asst.Content}
			if thinking {
				want.Reasoning = asst.ReasoningContent
			}
			if diff := cmp.Diff(want.Reasoning+"|"+want.Content, got.Reasoning+"|"+got.Content); diff != "" {
				t.Fatalf("text fields (-want +got):\n%s", diff)
			}
			if len(got.ToolCalls) != len(asst.ToolCalls) {
				t.Fatalf("got %d tool calls, want %d", len(got.ToolCalls), len(asst.ToolCalls))
			}
			for i, c := range got.ToolCalls {
				w := asst.ToolCalls[i].Function
				if c.Function.Name != w.Name || !jsonEqual(t, c.Function.Arguments, w.Arguments) {
					t.Errorf("call %d: got %s(%s), want %s(%s)", i, c.Function.Name, c.Function.Arguments, w.Name, w.Arguments)
				}
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Errorf("arguments %q: %v", a, err)
		return false
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatal(err)
	}
	return cmp.Equal(va, vb)
}

func TestGenerationPrompt(t *testing.T) {
	tmpl := kimiK3(t)
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, c := range []struct{ kwargs, want string }{
		{"true", `<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`},
		{"false", `<|open|>message role="assistant"<|sep|><|open|>response<|sep|>`},
	} {
		got, err := tmpl.GenerationPrompt(Input{Messages: msgs, Kwargs: kw("thinking", c.kwargs), Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("thinking=%s: generation prompt %q, want %q", c.kwargs, got, c.want)
		}
		o, err := tmpl.ParseOptions(Input{Messages: msgs, Kwargs: kw("thinking", c.kwargs), Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		if o.Thinking != (c.kwargs == "true") {
			t.Errorf("thinking=%s: ParseOptions.Thinking = %v", c.kwargs, o.Thinking)
		}
	}
}

// FuzzParser: the parser never panics, streaming in any chunking gives the
// whole-text result, and the deltas add up to it.
// fuzzFormats are the formats FuzzParser picks from by its format byte.
var fuzzFormats = []Format{FormatKimiK3, FormatKimiK2, FormatDeepSeekV3, FormatQwen3, FormatHermes, FormatContent, FormatDeepSeekR1,
	FormatQwen3Coder, FormatQwen35}

// FuzzParser feeds a reply in every format in fuzzed chunks: no panic, the
// deltas add up to the result after every chunk (nothing sent is taken
// back), and the streamed reply equals the whole-text parse.
func FuzzParser(f *testing.F) {
	for _, c := range parseCases {
		f.Add(c.in, []byte{3, 7, 1, 20}, c.opts.Thinking, uint8(0))
	}
	for i, fm := range fuzzFormats {
		for _, r := range formatReplies[fm] {
			f.Add(r, []byte{5, 1, 30, 2}, false, uint8(i))
			f.Add(r, []byte{9}, true, uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, text string, cuts []byte, thinking bool, format uint8) {
		o := ParseOptions{Format: fuzzFormats[int(format&0x7f)%len(fuzzFormats)], Thinking: thinking, ReasoningNone: format&0x80 != 0,
			Tools: llamaTestTools, NewID: func() string { return "id" }}
		whole := Parse(text, o)
		var chunks []string
		rest := text
		for _, c := range cuts {
			if rest == "" {
				break
			}
			n := int(c) % (len(rest) + 1)
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		chunks = append(chunks, rest)
		checkStreamSteps(t, chunks, o)
		checkStream(t, text, chunks, o, whole)
	})
}

// TestForcedCall: a reply that starts with ForcedCall parses as a call of
// that tool (its name escaped in the tag and unescaped back), with or
// without an open think section, and ForcedCall with no name leaves the
// name to what follows.
func TestForcedCall(t *testing.T) {
	const rest = `<|open|>argument key="q" type="string"<|sep|>x<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>`
	for _, thinking := range []bool{true, false} {
		o := ParseOptions{Thinking: thinking}
		for _, name := range []string{"search", `odd "name" & co`} {
			got := Parse(ForcedCall(o, name)+rest, o)
			if len(got.ToolCalls) != 1 || got.ToolCalls[0].Function.Name != name || got.ToolCalls[0].Function.Arguments != `{"q":"x"}` ||
				got.Reasoning != "" || got.Content != "" {
				t.Errorf("thinking %v, %q: %+v", thinking, name, got)
			}
		}
		got := Parse(ForcedCall(o, "")+`lookup" index="1"<|sep|>`+rest, o)
		if len(got.ToolCalls) != 1 || got.ToolCalls[0].Function.Name != "lookup" {
			t.Errorf("thinking %v, unnamed: %+v", thinking, got)
		}
	}
}
