// LangChain JS (@langchain/openai's ChatOpenAI) against k3 serve, as an
// agent framework uses it: invoke, stream, a forced tool call and the tool
// result sent back, over Chat Completions and over the Responses API. The
// model may have random weights, so the tests check shapes and mechanics.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ChatOpenAI } from "@langchain/openai";
import { HumanMessage, SystemMessage, ToolMessage } from "@langchain/core/messages";
import { baseURL, apiKey, modelID } from "./common.mjs";

async function chat(extra = {}) {
  return new ChatOpenAI({ model: await modelID(), apiKey: apiKey || "none", configuration: { baseURL: baseURL + "/v1" },
    maxRetries: 0, timeout: 120_000, temperature: 0, maxTokens: 12, ...extra });
}

const weather = { type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };

for (const api of ["chat completions", "responses"]) {
  const opts = api === "responses" ? { useResponsesApi: true } : {};

  test(`langchain (${api}): invoke returns an AIMessage with usage`, async () => {
    const llm = await chat(opts);
    const m = await llm.invoke([new SystemMessage("Be brief."), new HumanMessage("Say hello.")]);
    assert.equal(m._getType(), "ai");
    assert.equal(typeof m.text, "string");
    assert.ok(m.usage_metadata.input_tokens > 0, JSON.stringify(m.usage_metadata));
    assert.ok(m.usage_metadata.output_tokens > 0 && m.usage_metadata.output_tokens <= 12, JSON.stringify(m.usage_metadata));
  });

  test(`langchain (${api}): streamed chunks add up to the whole reply`, async () => {
    const llm = await chat(opts);
    const whole = await llm.invoke("Count to five.");
    let text = "", n = 0;
    for await (const ch of await llm.stream("Count to five.")) {
      text += ch.text;
      n++;
    }
    assert.ok(n > 1, `only ${n} chunks`);
    assert.equal(text, whole.text);
  });

  test(`langchain (${api}): a forced tool call and its result round trip`, async () => {
    const llm = (await chat({ ...opts, maxTokens: 24 })).bindTools([weather], { tool_choice: "get_weather" });
    const q = new HumanMessage("What is the weather in Paris?");
    const m = await llm.invoke([q]);
    assert.equal(m.tool_calls.length, 1, JSON.stringify(m));
    const call = m.tool_calls[0];
    assert.equal(call.name, "get_weather");
    assert.equal(typeof call.args, "object");
    assert.ok(call.id);
    const answer = await (await chat(opts)).bindTools([weather]).invoke([q, m,
      new ToolMessage({ tool_call_id: call.id, content: JSON.stringify({ city: "Paris", sky: "clear", celsius: 21 }) })]);
    assert.equal(answer._getType(), "ai");
    assert.ok(answer.usage_metadata.input_tokens > m.usage_metadata.input_tokens, "the tool result is in the prompt");
  });
}
