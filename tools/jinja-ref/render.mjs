// render.mjs: the reference chat-template renderer for k3's core/chat parity tests.
//
// stdin:  {"template": "...", "contexts": [{...}, ...]}
// stdout: [{"text": "..."} | {"error": "..."}, ...]  one entry per context, in order
//
// Contexts are rendered with @huggingface/jinja (the engine llama.cpp's own
// Jinja engine was modelled on), so k3's Go renderer can be compared with an
// independent implementation. Object key order in the JSON is kept, as
// llama.cpp keeps it (ordered_json).
import { Template } from "@huggingface/jinja";
import { readFileSync } from "node:fs";

const input = JSON.parse(readFileSync(0, "utf8"));
let template;
try {
  template = new Template(input.template);
} catch (e) {
  process.stdout.write(JSON.stringify((input.contexts || []).map(() => ({ error: "parse: " + e.message }))));
  process.exit(0);
}
const out = (input.contexts || []).map((ctx) => {
  try {
    return { text: template.render(ctx) };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
});
process.stdout.write(JSON.stringify(out));
