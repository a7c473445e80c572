package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/server"
)

const respWeatherTool = `"tools":[{"type":"function","name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"number"}}}}]`

// respReply reads a response object's output as a chat reply.
func respReply(t *testing.T, r map[string]any) reply {
	t.Helper()
	var out reply
	out.Finish = str(r["status"])
	for _, it := range r["output"].([]any) {
		switch str(dig(it, "type")) {
		case "reasoning":
			out.Reasoning += str(dig(it, "content", 0, "text"))
		case "message":
			if dig(it, "role") != "assistant" || dig(it, "content", 0, "type") != "output_text" {
				t.Errorf("bad message item %v", it)
			}
			out.Content += str(dig(it, "content", 0, "text"))
		case "function_call":
			if !strings.HasPrefix(str(dig(it, "id")), "fc_") || str(dig(it, "call_id")) == "" {
				t.Errorf("function_call without id/call_id: %v", it)
			}
			out.Calls = append(out.Calls, str(dig(it, "name"))+"("+str(dig(it, "arguments"))+")")
		default:
			t.Errorf("unknown output item %v", it)
		}
		if dig(it, "status") != "completed" {
			t.Errorf("item not completed: %v", it)
		}
	}
	return out
}

// TestResponsesReply: the scripted reply (reasoning, text, a tool call)
// comes out as reasoning, message and function_call items, whole and
// streamed, the stream's events in the documented order with consecutive
// sequence numbers and its deltas adding up to the final items.
func TestResponsesReply(t *testing.T) {
	ts := scriptedServer(t, scriptedReply, true)
	want := reply{Reasoning: "Plan: call it.", Content: "Checking the weather.",
		Calls: []string{`get_weather({"city":"Paris","days":3})`}, Finish: "completed"}
	tests := []struct {
		name, extra string
		want        reply
	}{
		{"tools", "," + respWeatherTool, want},
		{"max_output_tokens", `,"max_output_tokens":3`, reply{Finish: "incomplete"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"input":[{"role":"user","content":"Weather in Paris?"}],"instructions":"Be brief."` + tt.extra + `}`
			code, whole := postJSON(t, ts.URL+"/v1/responses", body)
			if code != 200 || whole["object"] != "response" || !strings.HasPrefix(str(whole["id"]), "resp_") {
				t.Fatalf("%d %v", code, whole)
			}
			got := respReply(t, whole)
			if tt.name == "max_output_tokens" {
				tt.want.Reasoning = got.Reasoning
				if dig(whole, "incomplete_details", "reason") != "max_output_tokens" {
					t.Errorf("incomplete_details %v", whole["incomplete_details"])
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("whole (-want +got):\n%s", d)
			}
			u := whole["usage"].(map[string]any)
			if u["input_tokens"].(float64) <= 0 || u["total_tokens"] != u["input_tokens"].(float64)+u["output_tokens"].(float64) ||
				dig(u, "input_tokens_details", "cached_tokens") == nil {
				t.Errorf("usage %v", u)
			}

			evs := postNamedStream(t, ts.URL+"/v1/responses", strings.TrimSuffix(body, "}")+`,"stream":true}`)
			for i, e := range evs {
				if e.Data["sequence_number"] != float64(i) {
					t.Fatalf("event %d %s has sequence_number %v", i, e.Name, e.Data["sequence_number"])
				}
			}
			last := evs[len(evs)-1]
			if evs[0].Name != "response.created" || evs[1].Name != "response.in_progress" || last.Name != "response."+got.Finish {
				t.Fatalf("stream frame: %v", names(evs))
			}
			final := last.Data["response"].(map[string]any)
			if d := cmp.Diff(got, respReply(t, final)); d != "" {
				t.Errorf("streamed final response differs (-whole +streamed):\n%s", d)
			}
			var deltas reply
			deltas.Finish = got.Finish
			var call string
			for _, e := range evs {
				switch e.Name {
				case "response.reasoning_text.delta":
					deltas.Reasoning += str(e.Data["delta"])
				case "response.output_text.delta":
					deltas.Content += str(e.Data["delta"])
				case "response.output_item.added":
					if dig(e.Data, "item", "type") == "function_call" {
						call = str(dig(e.Data, "item", "name")) + "("
					}
				case "response.function_call_arguments.delta":
					call += str(e.Data["delta"])
				case "response.function_call_arguments.done":
					deltas.Calls = append(deltas.Calls, call+")")
				}
			}
			if d := cmp.Diff(got, deltas); d != "" {
				t.Errorf("deltas do not add up to the reply (-whole +deltas):\n%s", d)
			}
		})
	}
}

// TestResponsesEventOrder pins the event sequence of a reply with all
// three kinds of item.
func TestResponsesEventOrder(t *testing.T) {
	ts := scriptedServer(t, scriptedReply, true)
	evs := postNamedStream(t, ts.URL+"/v1/responses", `{"input":"Weather?","stream":true,`+respWeatherTool+`}`)
	var got []string
	for _, n := range names(evs) {
		if !strings.HasSuffix(n, ".delta") || (len(got) > 0 && got[len(got)-1] != n) {
			got = append(got, n) // runs of deltas as one
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done",
		"response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("event order (-want +got):\n%s", d)
	}
	var added []any
	for _, e := range evs {
		if e.Name == "response.output_item.added" {
			added = append(added, e.Data["output_index"])
		}
	}
	if d := cmp.Diff([]any{0.0, 1.0, 2.0}, added); d != "" {
		t.Errorf("output_index of the items (-want +got):\n%s", d)
	}
}

// TestResponsesConversation: a function-call round trip renders the same
// prompt whether the conversation comes from previous_response_id or is
// resent as items, and the same as chat completions would; instructions do
// not carry over; an unknown id is a 400.
func TestResponsesConversation(t *testing.T) {
	ts, prompt := capturingServer(t, scriptedReply, server.Options{})
	code, first := postJSON(t, ts.URL+"/v1/responses", `{"input":"Weather in Paris?","instructions":"Be brief.",`+respWeatherTool+`}`)
	if code != 200 {
		t.Fatalf("%d %v", code, first)
	}
	var callID string
	for _, it := range first["output"].([]any) {
		if dig(it, "type") == "function_call" {
			callID = str(dig(it, "call_id"))
		}
	}
	if callID == "" {
		t.Fatalf("no function call in %v", first["output"])
	}
	output := fmt.Sprintf(`{"type":"function_call_output","call_id":%q,"output":"{\"temp\":21}"}`, callID)
	code, second := postJSON(t, ts.URL+"/v1/responses", `{"previous_response_id":"`+str(first["id"])+`","instructions":"Be brief.","input":[`+output+`],`+respWeatherTool+`}`)
	if code != 200 || second["previous_response_id"] != first["id"] {
		t.Fatalf("%d %v", code, second)
	}
	byID := *prompt
	items := `{"role":"user","content":"Weather in Paris?"},` + strings.TrimSuffix(strings.TrimPrefix(mustJSON(t, first["output"]), "["), "]")
	postJSON(t, ts.URL+"/v1/responses", `{"store":false,"instructions":"Be brief.","input":[`+items+`,`+output+`],`+respWeatherTool+`}`)
	if *prompt != byID {
		t.Errorf("resent items render another prompt:\n%q\nby id:\n%q", *prompt, byID)
	}
	postChat(t, ts.URL, `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},`+
		fmt.Sprintf(`{"role":"assistant","reasoning_content":"Plan: call it.","content":"Checking the weather.","tool_calls":[{"id":%q,"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":3}"}}]},`, callID)+
		fmt.Sprintf(`{"role":"tool","tool_call_id":%q,"content":"{\"temp\":21}"}],`, callID)+weatherTools+`}`)
	if *prompt != byID {
		t.Errorf("chat completions renders another prompt:\n%q\nresponses:\n%q", *prompt, byID)
	}
	postJSON(t, ts.URL+"/v1/responses", `{"previous_response_id":"`+str(first["id"])+`","input":[`+output+`],`+respWeatherTool+`}`)
	if strings.Contains(*prompt, "Be brief.") {
		t.Errorf("instructions carried over to the next response")
	}
	code, e := postJSON(t, ts.URL+"/v1/responses", `{"previous_response_id":"resp_nope","input":"hi"}`)
	if code != 400 || !strings.Contains(str(dig(e, "error", "message")), "resp_nope") {
		t.Errorf("unknown previous_response_id: %d %v", code, e)
	}
	// store:false responses are not kept.
	_, third := postJSON(t, ts.URL+"/v1/responses", `{"store":false,"input":"hi"}`)
	if code, _ := postJSON(t, ts.URL+"/v1/responses", `{"previous_response_id":"`+str(third["id"])+`","input":"hi"}`); code != 400 {
		t.Errorf("a store:false response was kept: %d", code)
	}
}

func TestResponsesErrors(t *testing.T) {
	ts := scriptedServer(t, "Hi.", true)
	tests := []struct {
		name, body string
		code       int
		msg        string
	}{
		{"no input", `{}`, 400, "input is required"},
		{"input a number", `{"input":3}`, 400, "string or an array"},
		{"unknown item", `{"input":[{"type":"web_search_call"}]}`, 400, `"web_search_call"`},
		{"unknown role", `{"input":[{"role":"robot","content":"x"}]}`, 400, `"robot"`},
		{"image part", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, 400, `"input_image"`},
		{"function_call without call_id", `{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, 400, "call_id"},
		{"tool type", `{"input":"x","tools":[{"type":"web_search"}]}`, 400, `"web_search"`},
		{"tool_choice object", `{"input":"x","tool_choice":{"type":"file_search"}}`, 400, "tool_choice"},
		{"tool_choice names no tool", `{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, 400, `"g"`},
		{"max_output_tokens 0", `{"input":"x","max_output_tokens":0}`, 400, "max_output_tokens = 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, e := postJSON(t, ts.URL+"/v1/responses", tt.body)
			if code != tt.code || !strings.Contains(str(dig(e, "error", "message")), tt.msg) || str(dig(e, "error", "type")) == "" {
				t.Errorf("%d %v, want %d and %q", code, e, tt.code, tt.msg)
			}
		})
	}
}
