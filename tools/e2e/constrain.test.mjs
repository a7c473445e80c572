// Constrained output and log-probabilities through the official openai
// client: response_format json_schema (chat) and text.format (Responses)
// always give JSON of the schema, even from a random-weight model;
// logprobs and top_logprobs on chat and completions have OpenAI's shape
// and sane values; echo returns the prompt with its log-probabilities.
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, modelID } from "./common.mjs";

const schema = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 8 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    pets: { type: "array", items: { enum: ["cat", "dog"] }, maxItems: 3 },
    address: { type: "object", properties: { city: { type: "string", maxLength: 6 } }, required: ["city"], additionalProperties: false },
  },
  required: ["name", "age", "pets", "address"],
  additionalProperties: false,
};

// valid checks a document against the schema above by hand.
function valid(doc) {
  assert.equal(typeof doc, "object");
  assert.deepEqual(Object.keys(doc).sort(), ["address", "age", "name", "pets"]);
  assert.ok(typeof doc.name === "string" && [...doc.name].length >= 1 && [...doc.name].length <= 8, JSON.stringify(doc.name));
  assert.ok(Number.isInteger(doc.age) && doc.age >= 0 && doc.age <= 120, String(doc.age));
  assert.ok(Array.isArray(doc.pets) && doc.pets.length <= 3 && doc.pets.every((p) => p === "cat" || p === "dog"));
  assert.deepEqual(Object.keys(doc.address), ["city"]);
  assert.ok([...doc.address.city].length <= 6);
}

const noThinking = { chat_template_kwargs: { thinking: false } };

test("response_format json_schema: every reply parses and follows the schema", async () => {
  const model = await modelID();
  for (let seed = 0; seed < 5; seed++) {
    const r = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "A person as JSON." }], seed, temperature: 1, max_tokens: 800,
      response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema } }, ...noThinking,
    });
    assert.equal(r.choices[0].finish_reason, "stop");
    valid(JSON.parse(r.choices[0].message.content));
  }
  // Streamed, the content deltas make the same kind of document.
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "A person as JSON." }], seed: 9, max_tokens: 800, stream: true,
    response_format: { type: "json_schema", json_schema: { name: "person", schema } }, ...noThinking,
  });
  let text = "";
  for await (const ch of stream) text += ch.choices[0]?.delta?.content || "";
  valid(JSON.parse(text));
});

test("an unsupported schema is a 400 that names the problem", async () => {
  const model = await modelID();
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { not: {} } } } } } }),
    (e) => e.status === 400 && /\/properties\/a: "not" is not supported/.test(e.message));
});

test("Responses text.format json_schema", async () => {
  const model = await modelID();
  const r = await client.responses.create({
    model, input: "A person as JSON.", max_output_tokens: 800, temperature: 1,
    text: { format: { type: "json_schema", name: "person", schema, strict: true } }, ...noThinking,
  });
  valid(JSON.parse(r.output_text));
  assert.equal(r.text.format.type, "json_schema");
});

test("chat logprobs and top_logprobs, whole and streamed", async () => {
  const model = await modelID();
  const req = { model, messages: [{ role: "user", content: "Hi" }], max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3, ...noThinking };
  const r = await client.chat.completions.create(req);
  const content = r.choices[0].logprobs.content;
  assert.ok(content.length > 0 && content.length <= r.usage.completion_tokens);
  for (const e of content) {
    assert.equal(typeof e.token, "string");
    assert.ok(Array.isArray(e.bytes));
    assert.ok(e.logprob <= 0 && Math.exp(e.logprob) >= 0);
    assert.equal(e.top_logprobs.length, 3);
    for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i].logprob <= e.top_logprobs[i - 1].logprob);
    assert.equal(e.top_logprobs[0].logprob, e.logprob); // greedy: the likeliest token
  }
  const streamed = [];
  for await (const ch of await client.chat.completions.create({ ...req, stream: true })) {
    for (const e of ch.choices[0]?.logprobs?.content || []) streamed.push(e.token);
  }
  assert.deepEqual(streamed, content.map((e) => e.token));
});

test("completions logprobs with echo", async () => {
  const model = await modelID();
  const r = await client.completions.create({ model, prompt: "The sky is", max_tokens: 5, temperature: 0, logprobs: 2, echo: true });
  const c = r.choices[0];
  assert.ok(c.text.includes("The sky is"));
  const lp = c.logprobs;
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.tokens.length, lp.top_logprobs.length);
  assert.equal(lp.tokens.length, lp.text_offset.length);
  assert.equal(lp.token_logprobs[0], null); // nothing predicts the first prompt token
  assert.ok(lp.tokens.length >= r.usage.prompt_tokens);
  for (let i = 1; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.ok(Object.keys(lp.top_logprobs[i]).length >= 1 && Object.keys(lp.top_logprobs[i]).length <= 2);
    assert.ok(lp.text_offset[i] > lp.text_offset[i - 1]);
  }
});
