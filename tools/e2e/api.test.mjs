// The official openai client against k3 serve: chat (whole and streamed,
// with the usage chunk), completions, stop strings, tools, and raw-HTTP
// error cases. The model may be a synthetic one with random weights, so the
// tests check shapes and invariants, never particular words.
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, raw, modelID, firstWord, apiKey } from "./common.mjs";

const user = [{ role: "user", content: "Say hello." }];

test("models lists the served model", async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].object, "model");
  assert.ok(list.data[0].id);
  // client.models.retrieve (GET /v1/models/{id}), and OpenAI's 404 for another id.
  const one = await client.models.retrieve(list.data[0].id);
  assert.equal(one.id, list.data[0].id);
  await assert.rejects(client.models.retrieve("no-such-model"), (e) => e.status === 404 && e.code === "model_not_found");
});

test("chat completion, not streamed", async () => {
  const model = await modelID();
  const r = await client.chat.completions.create({ model, messages: user, max_tokens: 12, temperature: 0 });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, "assistant");
  assert.ok(["stop", "length", "tool_calls"].includes(c.finish_reason), c.finish_reason);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, "number");
  assert.equal(r.timings.predicted_n, r.usage.completion_tokens);
  const text = (c.message.content || "") + (c.message.reasoning_content || "");
  if (c.finish_reason === "length") assert.equal(r.usage.completion_tokens, 12);
  assert.equal(typeof text, "string");
});

test("chat completion streamed, with the usage chunk", async () => {
  const model = await modelID();
  const stream = await client.chat.completions.create({
    model, messages: user, max_tokens: 10, stream: true, stream_options: { include_usage: true }, seed: 7,
  });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  assert.ok(chunks.length >= 3, `only ${chunks.length} chunks`);
  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  const usage = chunks[chunks.length - 1];
  assert.deepEqual(usage.choices, []);
  assert.ok(usage.usage.completion_tokens > 0);
  const last = chunks[chunks.length - 2];
  assert.ok(["stop", "length", "tool_calls"].includes(last.choices[0].finish_reason));
  for (const ch of chunks.slice(1, -2)) {
    assert.equal(ch.object, "chat.completion.chunk");
    assert.equal(ch.choices[0].finish_reason, null);
    const d = ch.choices[0].delta;
    assert.ok(d.content || d.reasoning_content || d.tool_calls, JSON.stringify(d));
  }
});

test("streamed and whole replies agree for the same seed", async () => {
  const model = await modelID();
  const req = { model, messages: user, max_tokens: 16, seed: 42, temperature: 0.7 };
  const whole = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  let content = "", reasoning = "";
  for await (const ch of stream) {
    const d = ch.choices[0]?.delta || {};
    content += d.content || "";
    reasoning += d.reasoning_content || "";
  }
  assert.equal(content, whole.choices[0].message.content || "");
  assert.equal(reasoning, whole.choices[0].message.reasoning_content || "");
});

test("completions: token prompt, streaming, stop strings", async () => {
  const model = await modelID();
  const base = { model, prompt: "Once upon a time", max_tokens: 24, temperature: 0 };
  const free = await client.completions.create(base);
  assert.equal(free.object, "text_completion");
  const text = free.choices[0].text;
  const word = firstWord(text);
  if (!word) return; // greedy output with no ASCII run: nothing to stop on
  const stopped = await client.completions.create({ ...base, stop: [word] });
  assert.equal(stopped.choices[0].text, text.slice(0, text.indexOf(word)));
  assert.equal(stopped.choices[0].finish_reason, "stop");

  const stream = await client.completions.create({ ...base, stop: word, stream: true });
  let streamed = "", finish = null;
  for await (const ch of stream) {
    streamed += ch.choices[0]?.text || "";
    finish = ch.choices[0]?.finish_reason || finish;
  }
  assert.equal(streamed, stopped.choices[0].text);
  assert.equal(finish, "stop");

  const toks = await raw("POST", "/tokenize", JSON.stringify({ content: "Once upon a time" }));
  const byTokens = await client.completions.create({ ...base, prompt: toks.json.tokens });
  assert.equal(byTokens.choices[0].text, text);
});

test("chat stop string cuts the reply", async () => {
  const model = await modelID();
  const base = { model, messages: user, max_tokens: 24, temperature: 0, chat_template_kwargs: { thinking: false } };
  const free = await client.chat.completions.create(base);
  const m = free.choices[0].message;
  const text = m.content || "";
  const word = firstWord(text);
  if (!word) return;
  const cut = await client.chat.completions.create({ ...base, stop: [word] });
  assert.equal(cut.choices[0].message.content || "", text.slice(0, text.indexOf(word)));
  assert.equal(cut.choices[0].finish_reason, "stop");
});

test("tools: declared, with a tool-call history, reply well-formed", async () => {
  const model = await modelID();
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
  const messages = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }] },
    { role: "tool", tool_call_id: "call_1", content: "{\"temp\":21}" },
  ];
  const r = await client.chat.completions.create({ model, messages, tools, tool_choice: "auto", max_tokens: 16 });
  const c = r.choices[0];
  for (const tc of c.message.tool_calls || []) {
    assert.equal(tc.type, "function");
    assert.equal(typeof tc.function.arguments, "string");
  }
  assert.equal(c.finish_reason === "tool_calls", (c.message.tool_calls || []).length > 0);
  const stream = await client.chat.completions.create({ model, messages, tools, max_tokens: 16, stream: true });
  for await (const ch of stream) assert.equal(ch.object, "chat.completion.chunk");
});

test("tool_choice naming a function gets a call of it, whole and streamed", async () => {
  const model = await modelID();
  const tools = [
    { type: "function", function: { name: "search", parameters: { type: "object", properties: { q: { type: "string" } } } } },
    { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } },
  ];
  const req = { model, messages: [{ role: "user", content: "Weather in Paris?" }], tools,
    tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 8 };
  const r = await client.chat.completions.create(req);
  const calls = r.choices[0].message.tool_calls || [];
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, "get_weather");
  let name = "";
  const stream = await client.chat.completions.create({ ...req, stream: true });
  for await (const ch of stream) for (const tc of ch.choices[0]?.delta?.tool_calls || []) name += tc.function?.name || "";
  assert.equal(name, "get_weather");
});

test("a follow-up turn reuses the previous prompt (cached_tokens)", async () => {
  const model = await modelID();
  const kw = { chat_template_kwargs: { thinking: false }, max_tokens: 6, temperature: 0 };
  const messages = [{ role: "user", content: "Hello, first turn." }];
  const first = await client.chat.completions.create({ model, messages, ...kw });
  messages.push({ role: "assistant", content: first.choices[0].message.content || "" }, { role: "user", content: "Second turn." });
  const second = await client.chat.completions.create({ model, messages, ...kw });
  assert.equal(second.usage.prompt_tokens_details.cached_tokens, first.usage.prompt_tokens);
  assert.equal(second.timings.cache_n, first.usage.prompt_tokens);
});

test("n = 3 choices, whole and streamed: choice i is the n = 1 reply with seed + i", async () => {
  const model = await modelID();
  const props = (await raw("GET", "/props")).json;
  const slots = props.total_slots;
  const req = { model, messages: user, max_tokens: 8, temperature: 1, seed: 5 };
  if (slots < 3) {
    // llama-server's limit: n is at most the slots (-np).
    await assert.rejects(client.chat.completions.create({ ...req, n: 3 }), (e) => e.status === 400 && /-np 3/.test(e.message));
    return;
  }
  const text = (m) => (m.reasoning_content || "") + "|" + (m.content || "");
  const alone = [];
  for (let i = 0; i < 3; i++) {
    const r = await client.chat.completions.create({ ...req, seed: 5 + i });
    alone.push(text(r.choices[0].message));
  }
  const whole = await client.chat.completions.create({ ...req, n: 3 });
  assert.deepEqual(whole.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(whole.choices.map((c) => text(c.message)), alone);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);
  assert.ok(whole.usage.completion_tokens > 3 && whole.usage.completion_tokens <= 24, JSON.stringify(whole.usage));
  const stream = await client.chat.completions.create({ ...req, n: 3, stream: true, stream_options: { include_usage: true } });
  const got = ["", "", ""].map(() => ({ reasoning_content: "", content: "" }));
  const finished = new Set();
  let usage = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      got[c.index].content += c.delta.content || "";
      got[c.index].reasoning_content += c.delta.reasoning_content || "";
      if (c.finish_reason) finished.add(c.index);
    }
  }
  assert.deepEqual(got.map(text), alone);
  assert.equal(finished.size, 3);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  const cmpl = await client.completions.create({ model, prompt: "Colours:", max_tokens: 6, temperature: 1, seed: 9, n: 3 });
  assert.deepEqual(cmpl.choices.map((c) => c.index), [0, 1, 2]);
  const one = await client.completions.create({ model, prompt: "Colours:", max_tokens: 6, temperature: 1, seed: 11 });
  assert.equal(cmpl.choices[2].text, one.choices[0].text);
  const r = await raw("POST", "/v1/chat/completions", JSON.stringify({ messages: user, n: slots + 1 }));
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /slots/);
});

test("errors are OpenAI-shaped with the right status", async () => {
  const cases = [
    ["GET", "/no/such/route", undefined, 404],
    ["POST", "/v1/chat/completions", "{not json", 400],
    ["POST", "/v1/chat/completions", JSON.stringify({ messages: "hi" }), 400],
    ["POST", "/v1/chat/completions", JSON.stringify({ messages: [] }), 400],
    ["POST", "/v1/chat/completions", JSON.stringify({ messages: [{ role: "wizard", content: "x" }] }), 400],
    ["POST", "/v1/chat/completions", JSON.stringify({ messages: user, max_tokens: 1e12 }), 400],
    ["POST", "/v1/completions", JSON.stringify({ prompt: "hello ".repeat(5000) }), 400],
    ["POST", "/v1/completions", "x".repeat(9 << 20), 413],
  ];
  for (const [method, path, body, status] of cases) {
    const r = await raw(method, path, body);
    assert.equal(r.status, status, `${method} ${path} ${String(body).slice(0, 40)}: ${r.text.slice(0, 200)}`);
    assert.ok(r.json?.error?.message && r.json.error.type, r.text.slice(0, 200));
  }
  try {
    await client.chat.completions.create({ model: "x", messages: [] });
    assert.fail("empty messages accepted");
  } catch (e) {
    assert.equal(e.status, 400);
  }
});

test("api key is enforced when set", { skip: !apiKey && "server runs without --api-key" }, async () => {
  const r = await raw("GET", "/v1/models", undefined, { Authorization: "Bearer wrong" });
  assert.equal(r.status, 401);
  assert.equal(r.json.error.type, "authentication_error");
  const h = await raw("GET", "/health", undefined, { Authorization: "" });
  assert.equal(h.status, 200);
});
