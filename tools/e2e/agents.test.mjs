// The Responses API (official openai client) and the Anthropic Messages API
// (official @anthropic-ai/sdk) against k3 serve: whole and streamed, and a
// tool round trip each. The model may have random weights, so the tests
// check shapes and the round trip's mechanics, never words; tool calls are
// forced with tool_choice.
import { test } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { client, baseURL, apiKey, modelID, raw } from "./common.mjs";

const anthropic = new Anthropic({ baseURL, apiKey: apiKey || "none", maxRetries: 0, timeout: 120_000 });

const weather = { type: "function", name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };

test("responses: whole, with usage and output items", async () => {
  const model = await modelID();
  const r = await client.responses.create({ model, input: "Say hello.", instructions: "Be brief.", max_output_tokens: 12, temperature: 0 });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, "response");
  assert.ok(["completed", "incomplete"].includes(r.status), r.status);
  assert.ok(r.output.length >= 1);
  for (const it of r.output) assert.ok(["message", "reasoning", "function_call"].includes(it.type), it.type);
  assert.equal(typeof r.output_text, "string");
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0 && r.usage.output_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, "number");
});

test("responses: streamed events in order, the final response matching them", async () => {
  const model = await modelID();
  const stream = await client.responses.create({ model, input: "Say hello.", max_output_tokens: 10, stream: true, temperature: 0 });
  const events = [];
  for await (const ev of stream) events.push(ev);
  assert.equal(events[0].type, "response.created");
  assert.equal(events[1].type, "response.in_progress");
  const last = events[events.length - 1];
  assert.ok(["response.completed", "response.incomplete"].includes(last.type), last.type);
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i));
  let text = "";
  for (const ev of events) if (ev.type === "response.output_text.delta") text += ev.delta;
  const msg = last.response.output.filter((it) => it.type === "message").map((it) => it.content[0].text).join("");
  assert.equal(text, msg);
  assert.equal(last.response.output.length, events.filter((e) => e.type === "response.output_item.done").length);
});

test("responses: function-call round trip by previous_response_id and by resending items", async () => {
  const model = await modelID();
  const first = await client.responses.create({ model, input: "Weather in Paris?", tools: [weather],
    tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 12 });
  const calls = first.output.filter((it) => it.type === "function_call");
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, "get_weather");
  assert.ok(calls[0].call_id);
  const output = { type: "function_call_output", call_id: calls[0].call_id, output: "{\"temp\":21}" };
  const second = await client.responses.create({ model, previous_response_id: first.id, input: [output], tools: [weather], max_output_tokens: 8 });
  assert.equal(second.previous_response_id, first.id);
  // The stored conversation is in the prompt: it is longer than the first one.
  assert.ok(second.usage.input_tokens > first.usage.input_tokens, `${second.usage.input_tokens} <= ${first.usage.input_tokens}`);
  const resent = await client.responses.create({ model, input: [{ role: "user", content: "Weather in Paris?" }, ...first.output, output],
    tools: [weather], max_output_tokens: 8, store: false });
  assert.equal(resent.usage.input_tokens, second.usage.input_tokens);
  await assert.rejects(client.responses.create({ model, previous_response_id: "resp_nope", input: "hi" }), (e) => e.status === 400);

  const stream = await client.responses.create({ model, input: "Weather in Paris?", tools: [weather],
    tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 12, stream: true });
  let args = "", done = null;
  for await (const ev of stream) {
    if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
    if (ev.type === "response.function_call_arguments.done") done = ev.arguments;
  }
  assert.equal(done, args);
});

const anthTool = { name: "get_weather", description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };

test("messages: whole, with usage and stop reason", async () => {
  const model = await modelID();
  const m = await anthropic.messages.create({ model, max_tokens: 12, system: "Be brief.", messages: [{ role: "user", content: "Say hello." }] });
  assert.match(m.id, /^msg_/);
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.ok(["end_turn", "max_tokens", "stop_sequence", "tool_use"].includes(m.stop_reason), m.stop_reason);
  for (const b of m.content) assert.ok(["text", "thinking", "tool_use"].includes(b.type), b.type);
  assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0 && m.usage.output_tokens <= 12);
  const count = await anthropic.messages.countTokens({ model, system: "Be brief.", messages: [{ role: "user", content: "Say hello." }] });
  assert.equal(count.input_tokens, m.usage.input_tokens + (m.usage.cache_read_input_tokens || 0));
});

test("messages: streamed events in order", async () => {
  const model = await modelID();
  const stream = await anthropic.messages.create({ model, max_tokens: 10, messages: [{ role: "user", content: "Say hello." }], stream: true });
  const types = [];
  let open = -1;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === "content_block_start") { assert.equal(open, -1); open = ev.index; }
    if (ev.type === "content_block_delta") assert.equal(ev.index, open);
    if (ev.type === "content_block_stop") { assert.equal(ev.index, open); open = -1; }
    if (ev.type === "message_delta") assert.ok(ev.delta.stop_reason && ev.usage.output_tokens > 0);
  }
  assert.equal(types[0], "message_start");
  assert.deepEqual(types.slice(-2), ["message_delta", "message_stop"]);
  // The SDK's own accumulator agrees with the events.
  const final = await anthropic.messages.stream({ model, max_tokens: 10, messages: [{ role: "user", content: "Say hello." }] }).finalMessage();
  assert.equal(final.role, "assistant");
  assert.ok(final.stop_reason);
});

test("messages: tool_use / tool_result round trip, whole and streamed", async () => {
  const model = await modelID();
  const req = { model, max_tokens: 12, tools: [anthTool], tool_choice: { type: "tool", name: "get_weather" },
    messages: [{ role: "user", content: "Weather in Paris?" }] };
  const m = await anthropic.messages.create(req);
  assert.equal(m.stop_reason, "tool_use");
  const uses = m.content.filter((b) => b.type === "tool_use");
  assert.equal(uses.length, 1);
  assert.equal(uses[0].name, "get_weather");
  assert.equal(typeof uses[0].input, "object");
  const next = await anthropic.messages.create({ model, max_tokens: 8, tools: [anthTool], messages: [
    ...req.messages, { role: "assistant", content: m.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: uses[0].id, content: "{\"temp\":21}" }] }] });
  assert.equal(next.type, "message");
  // Anthropic counts tokens read from the prompt cache apart.
  const prompt = (u) => u.input_tokens + (u.cache_read_input_tokens || 0);
  assert.ok(prompt(next.usage) > prompt(m.usage), `${prompt(next.usage)} <= ${prompt(m.usage)}`);

  const stream = await anthropic.messages.create({ ...req, stream: true });
  let name = "", json = "", stop = null;
  for await (const ev of stream) {
    if (ev.type === "content_block_start" && ev.content_block.type === "tool_use") name = ev.content_block.name;
    if (ev.type === "content_block_delta" && ev.delta.type === "input_json_delta") json += ev.delta.partial_json;
    if (ev.type === "message_delta") stop = ev.delta.stop_reason;
  }
  assert.equal(name, "get_weather");
  assert.equal(stop, "tool_use");
  assert.equal(typeof json, "string");
});

test("messages: errors in Anthropic's shape", async () => {
  const r = await raw("POST", "/v1/messages", JSON.stringify({ messages: [] }));
  assert.equal(r.status, 400);
  assert.equal(r.json.type, "error");
  assert.equal(r.json.error.type, "invalid_request_error");
  await assert.rejects(anthropic.messages.create({ model: "x", max_tokens: 4, messages: [{ role: "robot", content: "hi" }] }),
    (e) => e instanceof Anthropic.BadRequestError);
});
