package server_test

import (
	"testing"

	"github.com/k3-inference/k3/core/server"
)

func TestSmoke(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	code, _, body := ts.do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8}`)
	t.Logf("%d %s\n%s", code, body, ts.log.String())
	code, _, body = ts.do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`)
	t.Logf("%d %s\n%s", code, body, ts.log.String())
}
