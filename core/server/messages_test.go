package server_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/server"
)

const anthWeatherTool = `"tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"number"}}}}]`

// anthReply reads a message's content blocks as a chat reply, with
// stop_reason as the finish.
func anthReply(t *testing.T, m map[string]any) reply {
	t.Helper()
	out := reply{Finish: str(m["stop_reason"])}
	for _, b := range m["content"].([]any) {
		switch str(dig(b, "type")) {
		case "thinking":
			out.Reasoning += str(dig(b, "thinking"))
		case "text":
			out.Content += str(dig(b, "text"))
		case "tool_use":
			if str(dig(b, "id")) == "" {
				t.Errorf("tool_use without id: %v", b)
			}
			out.Calls = append(out.Calls, str(dig(b, "name"))+"("+mustJSON(t, dig(b, "input"))+")")
		default:
			t.Errorf("unknown block %v", b)
		}
	}
	return out
}

// TestMessagesReply: whole and streamed, the scripted reply comes out as
// thinking, text and tool_use blocks with the stop reason each way of
// ending gives; the stream's events are framed as Anthropic's and add up
// to the whole reply.
func TestMessagesReply(t *testing.T) {
	ts := scriptedServer(t, scriptedReply, true)
	plain := scriptedServer(t, "Hello there.", true)
	tests := []struct {
		name, url, extra string
		want             reply
		stopSeq          string
	}{
		{"tool_use", ts.URL, "," + anthWeatherTool, reply{Reasoning: "Plan: call it.", Content: "Checking the weather.",
			Calls: []string{`get_weather({"city":"Paris","days":3})`}, Finish: "tool_use"}, ""},
		{"end_turn", plain.URL, `,"thinking":{"type":"disabled"}`, reply{Content: "Hello there.", Finish: "end_turn"}, ""},
		{"stop_sequence", plain.URL, `,"stop_sequences":["xyz","there"],"thinking":{"type":"disabled"}`, reply{Content: "Hello ", Finish: "stop_sequence"}, "there"},
		{"max_tokens", plain.URL, `,"max_tokens":1,"thinking":{"type":"disabled"}`, reply{Finish: "max_tokens"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":"Weather in Paris?"}]` + tt.extra + `}`
			code, whole := postJSON(t, tt.url+"/v1/messages", body)
			if code != 200 || whole["type"] != "message" || whole["role"] != "assistant" || !strings.HasPrefix(str(whole["id"]), "msg_") {
				t.Fatalf("%d %v", code, whole)
			}
			got := anthReply(t, whole)
			if tt.name == "max_tokens" {
				tt.want.Content = got.Content
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("whole (-want +got):\n%s", d)
			}
			if str(whole["stop_sequence"]) != tt.stopSeq {
				t.Errorf("stop_sequence %v, want %q", whole["stop_sequence"], tt.stopSeq)
			}
			if dig(whole, "usage", "input_tokens").(float64) <= 0 || dig(whole, "usage", "output_tokens").(float64) <= 0 {
				t.Errorf("usage %v", whole["usage"])
			}

			evs := postNamedStream(t, tt.url+"/v1/messages", strings.TrimSuffix(body, "}")+`,"stream":true}`)
			n := len(evs)
			if n < 3 || evs[0].Name != "message_start" || evs[n-2].Name != "message_delta" || evs[n-1].Name != "message_stop" {
				t.Fatalf("stream frame: %v", names(evs))
			}
			if dig(evs[0].Data, "message", "usage", "input_tokens").(float64) <= 0 || len(dig(evs[0].Data, "message", "content").([]any)) != 0 {
				t.Errorf("message_start %v", evs[0].Data)
			}
			streamed := reply{Finish: str(dig(evs[n-2].Data, "delta", "stop_reason"))}
			open, next := -1, 0
			var call string
			for _, e := range evs[1 : n-2] {
				idx := int(e.Data["index"].(float64))
				switch e.Name {
				case "content_block_start":
					if open != -1 || idx != next {
						t.Fatalf("block %d opened while %d open, want %d", idx, open, next)
					}
					open = idx
					if dig(e.Data, "content_block", "type") == "tool_use" {
						call = str(dig(e.Data, "content_block", "name")) + "("
					}
				case "content_block_delta":
					if idx != open {
						t.Fatalf("delta for block %d while %d is open", idx, open)
					}
					switch d := e.Data["delta"].(map[string]any); d["type"] {
					case "thinking_delta":
						streamed.Reasoning += str(d["thinking"])
					case "text_delta":
						streamed.Content += str(d["text"])
					case "input_json_delta":
						call += str(d["partial_json"])
					default:
						t.Errorf("unknown delta %v", d)
					}
				case "content_block_stop":
					if idx != open {
						t.Fatalf("stop for block %d while %d is open", idx, open)
					}
					if call != "" {
						streamed.Calls = append(streamed.Calls, call+")")
						call = ""
					}
					open, next = -1, next+1
				default:
					t.Fatalf("unexpected event %s", e.Name)
				}
			}
			if d := cmp.Diff(got, streamed); d != "" {
				t.Errorf("streamed reply differs (-whole +streamed):\n%s", d)
			}
			if str(dig(evs[n-2].Data, "delta", "stop_sequence")) != tt.stopSeq || dig(evs[n-2].Data, "usage", "output_tokens") != dig(whole, "usage", "output_tokens") {
				t.Errorf("message_delta %v", evs[n-2].Data)
			}
		})
	}
}

// TestMessagesToolRoundTrip: a conversation with tool_use and tool_result
// blocks renders the prompt chat completions renders for the same
// conversation, and count_tokens counts that prompt.
func TestMessagesToolRoundTrip(t *testing.T) {
	ts, prompt := capturingServer(t, "Sunny.", server.Options{})
	msgs := `"system":"Be brief.","messages":[{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"Plan.","signature":""},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"21C"}]},{"type":"text","text":"Thanks."}]}]`
	code, m := postJSON(t, ts.URL+"/v1/messages", `{"max_tokens":8,`+msgs+`,`+anthWeatherTool+`}`)
	if code != 200 {
		t.Fatalf("%d %v", code, m)
	}
	anth := *prompt
	postChat(t, ts.URL, `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},`+
		`{"role":"assistant","reasoning_content":"Plan.","content":"Checking.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},`+
		`{"role":"tool","tool_call_id":"toolu_1","content":"21C"},{"role":"user","content":"Thanks."}],`+weatherTools+`}`)
	if *prompt != anth {
		t.Errorf("messages and chat completions render different prompts:\n%q\n%q", anth, *prompt)
	}
	code, count := postJSON(t, ts.URL+"/v1/messages/count_tokens", `{`+msgs+`,`+anthWeatherTool+`}`)
	if code != 200 || count["input_tokens"] != dig(m, "usage", "input_tokens").(float64)+dig(m, "usage", "cache_read_input_tokens").(float64) {
		t.Errorf("count_tokens %d %v, usage %v", code, count, m["usage"])
	}
}

// TestMessagesErrors: errors on the Messages routes come in Anthropic's
// shape, invalid requests as 400, and the API key is taken from x-api-key.
func TestMessagesErrors(t *testing.T) {
	ts := scriptedServer(t, "Hi.", true)
	keyed, _ := capturingServer(t, "Hi.", server.Options{APIKey: "sekret"})
	ok := `{"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, url, path, body string
		hdr                   []string
		code                  int
		typ, msg              string
	}{
		{"no messages", ts.URL, "/v1/messages", `{"max_tokens":4,"messages":[]}`, nil, 400, "invalid_request_error", "at least one message"},
		{"bad role", ts.URL, "/v1/messages", `{"messages":[{"role":"system","content":"x"}]}`, nil, 400, "invalid_request_error", `"system"`},
		{"bad block", ts.URL, "/v1/messages", `{"messages":[{"role":"user","content":[{"type":"image"}]}]}`, nil, 400, "invalid_request_error", `"image"`},
		{"tool_use from the user", ts.URL, "/v1/messages", `{"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`, nil, 400, "invalid_request_error", "assistant"},
		{"tool_choice names no tool", ts.URL, "/v1/messages", `{"messages":[{"role":"user","content":"x"}],` + anthWeatherTool + `,"tool_choice":{"type":"tool","name":"g"}}`, nil, 400, "invalid_request_error", `"g"`},
		{"bad tool_choice", ts.URL, "/v1/messages", `{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"maybe"}}`, nil, 400, "invalid_request_error", "maybe"},
		{"temperature", ts.URL, "/v1/messages", `{"messages":[{"role":"user","content":"x"}],"temperature":-1}`, nil, 400, "invalid_request_error", "temperature"},
		{"malformed JSON", ts.URL, "/v1/messages", `{"messages":`, nil, 400, "invalid_request_error", "malformed"},
		{"count_tokens", ts.URL, "/v1/messages/count_tokens", `{"messages":"x"}`, nil, 400, "invalid_request_error", "messages"},
		{"no key", keyed.URL, "/v1/messages", ok, nil, 401, "authentication_error", "API Key"},
		{"wrong x-api-key", keyed.URL, "/v1/messages", ok, []string{"x-api-key", "nope"}, 401, "authentication_error", "API Key"},
		{"x-api-key", keyed.URL, "/v1/messages", ok, []string{"x-api-key", "sekret"}, 200, "", ""},
		{"x-api-key elsewhere", keyed.URL, "/v1/chat/completions", `{"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, []string{"X-Api-Key", "sekret"}, 200, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, e := postJSON(t, tt.url+tt.path, tt.body, tt.hdr...)
			if code != tt.code {
				t.Fatalf("status %d, want %d: %v", code, tt.code, e)
			}
			if tt.typ == "" {
				return
			}
			if e["type"] != "error" || str(dig(e, "error", "type")) != tt.typ || !strings.Contains(str(dig(e, "error", "message")), tt.msg) {
				t.Errorf("%v, want an Anthropic error of type %s saying %q", e, tt.typ, tt.msg)
			}
		})
	}
	// The default max_tokens is Anthropic's 400 only as a cap: the scripted reply ends first.
	code, m := postJSON(t, ts.URL+"/v1/messages", `{"messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 || m["stop_reason"] != "end_turn" {
		t.Errorf("without max_tokens: %d %v", code, m)
	}
}
