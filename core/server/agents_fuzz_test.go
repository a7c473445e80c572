package server

import (
	"encoding/json"
	"testing"
)

// FuzzAgentRequests: any body the JSON decoder accepts becomes a chat
// request or a clear error in both translations, never a panic.
func FuzzAgentRequests(f *testing.F) {
	for _, s := range []string{
		`{"input":"hi"}`,
		`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}]}`,
		`{"input":[{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t"}]},{"role":"assistant","content":[{"type":"output_text","text":"a"}]}]}`,
		`{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"}}`,
		`{"system":[{"type":"text","text":"s"}],"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"any"},"thinking":{"type":"enabled"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var s Server
		var rr responsesRequest
		if decodeJSON(body, &rr) == nil {
			_, _, _ = s.responsesChat(&rr)
		}
		var mr messagesRequest
		if decodeJSON(body, &mr) == nil {
			if creq, aerr := messagesChat(&mr); aerr == nil {
				if _, err := json.Marshal(creq.Messages); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
