// Drives the chat page in Debian's headless chromium. The first test streams
// a real reply from k3 serve; the model has random weights, so the others
// answer the page's fetch with canned SSE streams (page.route) to get
// markdown, code and hostile HTML into it. Screenshots go to K3_E2E_OUT
// (default ./out): page.png, desktop-markdown.png, phone-markdown.png.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { baseURL, apiKey, raw } from "./common.mjs";

async function metric(name) {
  const r = await raw("GET", "/metrics");
  const m = new RegExp("^" + name + " (\\S+)$", "m").exec(r.text);
  return m ? Number(m[1]) : NaN;
}

const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const outDir = process.env.K3_E2E_OUT || path.join(path.dirname(new URL(import.meta.url).pathname), "out");

// open starts a fresh browser profile on the page; it is closed after t.
async function open(t, { viewport = { width: 1366, height: 800 }, bypassCSP = false } = {}) {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "k3-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath, headless: true, viewport, bypassCSP,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  t.after(async () => {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  });
  const page = context.pages()[0] || await context.newPage();
  const outside = [], errors = [], requests = [];
  page.on("request", (r) => { requests.push(r.url()); if (!r.url().startsWith(baseURL)) outside.push(r.url()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  if (apiKey) {
    await page.addInitScript((key) => {
      const s = JSON.parse(localStorage.getItem("k3.settings") || "{}");
      s.api_key = key;
      localStorage.setItem("k3.settings", JSON.stringify(s));
    }, apiKey);
  }
  await page.goto(baseURL + "/");
  await page.waitForSelector("#st-state.ready", { timeout: 30_000 });
  return { context, page, outside, errors, requests };
}

// sse is a chat completion stream that says text, a few characters a chunk.
function sse(text) {
  const ev = (o) => "data: " + JSON.stringify(o) + "\n\n";
  let s = ev({ choices: [{ index: 0, delta: { role: "assistant", content: "" } }] });
  for (let i = 0; i < text.length; i += 7) s += ev({ choices: [{ index: 0, delta: { content: text.slice(i, i + 7) } }] });
  s += ev({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] });
  s += ev({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 20, total_tokens: 25 },
    timings: { prompt_n: 5, prompt_per_second: 100, predicted_n: 20, predicted_per_second: 50 } });
  return s + "data: [DONE]\n\n";
}

// canned answers the page's chat requests with reply(n) for the n-th
// request (1-based) and records each request's headers and body.
async function canned(page, reply) {
  const seen = [];
  await page.route("**/v1/chat/completions", async (route) => {
    const req = route.request();
    seen.push({ headers: req.headers(), body: req.postDataJSON() });
    await route.fulfill({ status: 200, headers: { "Content-Type": "text/event-stream" }, body: sse(reply(seen.length)) });
  });
  return seen;
}

async function say(page, text) {
  const before = await page.locator(".msg.assistant[data-index]").count();
  await page.fill("#input", text);
  await page.click("#send");
  await page.waitForFunction((n) => document.querySelectorAll(".msg.assistant[data-index]").length > n
    && document.querySelector("#send").offsetParent !== null, before, { timeout: 10_000 });
}

const MARKDOWN = [
  "## Reading a file",
  "",
  "Use **`open`** with a *context manager*, see [the docs](https://docs.python.org/3/):",
  "",
  "```python",
  "def count_lines(path):",
  "    # one pass, constant memory",
  "    with open(path) as f:",
  "        return sum(1 for _ in f)",
  "",
  'print(count_lines("notes.txt"), True, 42)',
  "```",
  "",
  "1. it closes the file",
  "2. it reads lazily",
  "",
  "| mode | meaning |",
  "|------|---------|",
  "| `r`  | read    |",
].join("\n");

test("chat page streams a reply and fills the status bar", async (t) => {
  const { page, outside, errors } = await open(t);
  const chatRequests = [];
  page.on("request", (r) => { if (r.url().endsWith("/v1/chat/completions")) chatRequests.push(r.headers()); });
  await page.fill("#s-max_tokens", "24");
  await page.fill("#input", "Tell me a short story.");
  await page.click("#send");
  // Streamed text appears while the request runs: the stop button shows.
  await page.waitForFunction(() => {
    const a = document.querySelector(".msg.assistant");
    return a && ((a.querySelector(".text")?.textContent || "") + (a.querySelector(".rtext")?.textContent || "")).length > 0;
  }, null, { timeout: 60_000 });
  await page.waitForSelector(".msg.assistant .meta", { timeout: 120_000 });
  await page.waitForFunction(() => /\d/.test(document.querySelector("#st-decode").textContent)
    && /\d/.test(document.querySelector("#st-prefill").textContent)
    && /\d/.test(document.querySelector("#st-mem").textContent), null, { timeout: 10_000 });
  assert.match(await page.textContent(".msg.assistant .meta"), /tok\/s/);
  // The server refuses a body that is not declared JSON; the page declares it.
  assert.equal(chatRequests[0]["content-type"], "application/json");
  assert.equal((await raw("POST", "/v1/chat/completions", "{}", { "Content-Type": "text/plain" })).status, 415);
  fs.mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: path.join(outDir, "page.png") });

  // Regenerate replaces the last reply with a new one.
  await page.click(".msg.assistant .act-regen");
  await page.waitForSelector(".msg.assistant .meta", { timeout: 120_000 });
  assert.equal(await page.locator(".msg.assistant").count(), 1);

  // Stop ends a reply in progress (here during its prompt evaluation,
  // which takes the tiny model a good second) and frees the engine.
  await page.fill("#s-max_tokens", "2000");
  await page.fill("#input", "A second question.");
  await page.click("#send");
  await page.click("#stop", { timeout: 5_000 });
  await page.waitForSelector("#send:visible", { timeout: 10_000 });
  assert.match(await page.locator(".msg.assistant .meta").last().textContent(), /stopped/);
  for (let i = 0; (await metric("k3_requests_processing")) !== 0; i++) {
    assert.ok(i < 100, "the stopped request still runs on the server");
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok((await metric("k3_requests_cancelled_total")) >= 1);

  // New chat clears the conversation.
  await page.click("#new-chat");
  assert.equal(await page.locator(".msg").count(), 0);
  assert.equal(await page.isVisible("#empty"), true);
  assert.deepEqual(outside, [], "the page fetched something outside the server");
  assert.deepEqual(errors, []);
});

// The markdown subset, case by case: what each input becomes in the DOM.
const A = (href, text, cls) => `<a href="${href}" target="_blank" rel="noopener noreferrer"${cls ? ` class="${cls}"` : ""}>${text}</a>`;
const MD_CASES = [
  ["plain **bold** *em* `code` ~~gone~~ __strong__ _em_ ***both***",
    "<p>plain <strong>bold</strong> <em>em</em> <code>code</code> <del>gone</del> <strong>strong</strong> <em>em</em> <strong><em>both</em></strong></p>"],
  ["snake_case_name and 2 * 3 * 4", "<p>snake_case_name and 2 * 3 * 4</p>"],
  ["line one\nline two", "<p>line one<br>line two</p>"],
  ["# H1\n###### H6 ##\n#hashtag", "<h1>H1</h1><h6>H6</h6><p>#hashtag</p>"],
  ["- a\n- b\n  - c\n- d", "<ul><li>a</li><li>b<ul><li>c</li></ul></li><li>d</li></ul>"],
  ["3. x\n4. y", '<ol start="3"><li>x</li><li>y</li></ol>'],
  ["- a\n\n- b", "<ul><li><p>a</p></li><li><p>b</p></li></ul>"],
  ["1. one\n   more\n2. two\n\nafter", "<ol><li>one<br>more</li><li>two</li></ol><p>after</p>"],
  ["> quote\n> more\n\nout", "<blockquote><p>quote<br>more</p></blockquote><p>out</p>"],
  ["a\n\n---\n\n* * *", "<p>a</p><hr><hr>"],
  ["\\*not em\\* \\`not code\\`", "<p>*not em* `not code`</p>"],
  ["- [ ] todo\n- [x] done",
    '<ul><li class="task"><span class="box">☐ </span>todo</li><li class="task"><span class="box">☑ </span>done</li></ul>'],
  ["a | b\n--|:-:\n1 | 2\n3", '<div class="tablewrap"><table><thead><tr><th>a</th><th style="text-align: center;">b</th></tr></thead>'
    + '<tbody><tr><td>1</td><td style="text-align: center;">2</td></tr></tbody></table></div><p>3</p>'],
  ["<b>x</b> & <i onclick=y>", "<p>&lt;b&gt;x&lt;/b&gt; &amp; &lt;i onclick=y&gt;</p>"],
  ["[a](javascript:alert(1)) [d](data:text/html,x) [b](https://e.x/a_(b)) <https://e.x/c> see https://e.x/d. (https://e.x/y)",
    `<p>a d ${A("https://e.x/a_(b)", "b")} ${A("https://e.x/c", "https://e.x/c")} see ${A("https://e.x/d", "https://e.x/d")}. (${A("https://e.x/y", "https://e.x/y")})</p>`],
  ["![alt](https://e.x/i.png)", `<p>${A("https://e.x/i.png", "🖼 alt", "imglink")}</p>`],
  ["**unclosed bold and `unclosed code", "<p>**unclosed bold and `unclosed code</p>"],
  ["`` a ` b ``", "<p><code>a ` b</code></p>"],
  ["text\n# heading\n- item\n```\n<code>\n```", '<p>text</p><h1>heading</h1><ul><li>item</li></ul><div class="codeblock"><div class="codehead">'
    + '<span class="lang">text</span><button class="copy-code" type="button">Copy</button></div><pre><code class="hljs">&lt;code&gt;</code></pre></div>'],
  // A fence still open (a reply mid-stream) is code to the end; a longer fence holds a shorter one.
  ["~~~~\nx\n```\n~~~~\nafter", '<div class="codeblock"><div class="codehead"><span class="lang">text</span><button class="copy-code" type="button">Copy</button></div>'
    + '<pre><code class="hljs">x\n```</code></pre></div><p>after</p>'],
  ["```js\nlet s = 'it'", '<div class="codeblock"><div class="codehead"><span class="lang">js</span><button class="copy-code" type="button">Copy</button></div>'
    + '<pre><code class="hljs language-js"><span class="hljs-keyword">let</span> s = <span class="hljs-string">\'it\'</span></code></pre></div>'],
];

// The highlighter, one line per language family: hljs classes on tokens.
const S = (cls, text) => `<span class="hljs-${cls}">${text}</span>`;
const HL_CASES = [
  ['{"a": 1, "b": [true, null]} // c', "json",
    `{${S("attr", '"a"')}: ${S("number", "1")}, ${S("attr", '"b"')}: [${S("literal", "true")}, ${S("literal", "null")}]} ${S("comment", "// c")}`],
  ['echo "$HOME" ${x#y} $1 # note', "bash", `echo ${S("string", '"$HOME"')} ${S("variable", "${x#y}")} ${S("variable", "$1")} ${S("comment", "# note")}`],
  ["func f() error { return nil } /* x */", "go",
    `${S("keyword", "func")} ${S("title function_", "f")}() ${S("keyword", "error")} { ${S("keyword", "return")} ${S("literal", "nil")} } ${S("comment", "/* x */")}`],
  ["const s = `a\n${b}` // <i>", "ts", `${S("keyword", "const")} s = ${S("string", "`a\n${b}`")} ${S("comment", "// &lt;i&gt;")}`],
  ["x = 1 # <b>", "nosuchlang", "x = 1 # &lt;b&gt;"],
];

test("the charts page draws the server's live history while a reply streams", async (t) => {
  const { context, errors, outside } = await open(t);
  const charts = await context.newPage();
  charts.on("pageerror", (e) => errors.push(String(e)));
  await charts.goto(baseURL + "/stats.html");
  // A generation while the page watches: decode and disk lines get points.
  const gen = raw("POST", "/v1/completions", JSON.stringify({ prompt: "Once upon a time", max_tokens: 64, ignore_eos: true }));
  await charts.waitForFunction(() => /tok\/s/.test(document.querySelector("#c-decode .now").textContent)
    && /B/.test(document.querySelector("#c-mem .now").textContent), null, { timeout: 30_000 });
  await gen;
  // Each canvas has pixels drawn (axes at least, lines where data exist).
  const drawn = await charts.evaluate(() => [...document.querySelectorAll("canvas")].map((c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
    return n;
  }));
  assert.equal(drawn.length, 5);
  for (const n of drawn) assert.ok(n > 100, `a canvas has only ${n} drawn pixels`);
  assert.match(await charts.textContent("#model-name"), /\S/);
  fs.mkdirSync(outDir, { recursive: true });
  await charts.screenshot({ path: path.join(outDir, "charts.png"), fullPage: true });
  assert.deepEqual(errors, []);
  assert.deepEqual(outside, []);
});

test("the markdown subset renders each construct to the expected DOM", async (t) => {
  const { page, errors } = await open(t);
  for (const [src, want] of MD_CASES) {
    const got = await page.evaluate((s) => {
      const d = document.createElement("div");
      d.appendChild(Markdown.render(s));
      return d.innerHTML;
    }, src);
    assert.equal(got, want, "markdown " + JSON.stringify(src));
  }
  for (const [src, lang, want] of HL_CASES) {
    const got = await page.evaluate(([s, l]) => {
      const c = document.createElement("code");
      Markdown.highlight(s, l, c);
      return c.innerHTML;
    }, [src, lang]);
    assert.equal(got, want, lang + " " + JSON.stringify(src));
  }
  assert.deepEqual(errors, []);
});

test("a markdown reply renders headings, lists, tables and highlighted code", async (t) => {
  const { page, outside, errors } = await open(t);
  await canned(page, () => MARKDOWN);
  await say(page, "How do I count the lines of a file in Python?");
  const a = page.locator(".msg.assistant .text");
  assert.equal(await a.locator("h2").textContent(), "Reading a file");
  assert.equal(await a.locator("p strong code").textContent(), "open");
  assert.equal(await a.locator("p em").textContent(), "context manager");
  const link = a.locator("a");
  assert.equal(await link.getAttribute("href"), "https://docs.python.org/3/");
  assert.equal(await link.getAttribute("rel"), "noopener noreferrer");
  assert.deepEqual(await a.locator("ol > li").allTextContents(), ["it closes the file", "it reads lazily"]);
  assert.deepEqual(await a.locator("table td").allTextContents(), ["r", "read"]);
  const code = a.locator("pre > code.hljs.language-python");
  assert.equal(await code.count(), 1);
  assert.match(await code.textContent(), /^def count_lines\(path\):\n {4}# one pass/);
  assert.deepEqual(await code.locator(".hljs-keyword").allTextContents(), ["def", "with", "as", "return", "for", "in"]);
  assert.deepEqual(await code.locator(".hljs-comment").allTextContents(), ["# one pass, constant memory"]);
  assert.deepEqual(await code.locator(".hljs-string").allTextContents(), ['"notes.txt"']);
  assert.deepEqual(await code.locator(".hljs-number").allTextContents(), ["1", "42"]);
  assert.deepEqual(await code.locator(".hljs-literal").allTextContents(), ["True"]);
  assert.deepEqual(await code.locator(".hljs-title").allTextContents(), ["count_lines", "open", "sum", "print", "count_lines"]);
  fs.mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: path.join(outDir, "desktop-markdown.png") });
  assert.deepEqual(outside, []);
  assert.deepEqual(errors, []);
});

test("HTML in a reply is shown as text and never runs", async (t) => {
  // Without the page's CSP, so that only the renderer stands between the
  // model's text and the DOM.
  const { page, errors, requests } = await open(t, { bypassCSP: true });
  const hostile = [
    'Look: <img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script>',
    '<iframe src="javascript:parent.__pwned=3"></iframe> <b onmouseover="window.__pwned=4">bold?</b>',
    "[click me](javascript:window.__pwned=5) ![pic](x onerror=alert(1)) [data](data:text/html,<script>1</script>)",
    "```html",
    '<img src=x onerror="window.__pwned=6">',
    "```",
    '<a href="javascript:window.__pwned=7">raw link</a>',
  ].join("\n");
  await canned(page, () => hostile);
  await say(page, "Say something nasty.");
  await page.hover(".msg.assistant .text");
  await page.click(".msg.assistant .text >> text=click me");
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  const conv = page.locator("#conversation");
  for (const tag of ["img", "script", "iframe", "b", "a"]) {
    assert.equal(await conv.locator(tag).count(), 0, "a <" + tag + "> element made it into the page");
  }
  assert.equal(await conv.locator("[onerror], [onmouseover]").count(), 0);
  const text = await page.textContent(".msg.assistant .text");
  assert.ok(text.includes('<img src=x onerror="window.__pwned=1">'), text);
  assert.ok(text.includes("<script>window.__pwned=2</script>"), text);
  assert.equal(await conv.locator("pre code").textContent(), '<img src=x onerror="window.__pwned=6">');
  assert.ok(!requests.some((u) => u.endsWith("/x")), "the page fetched the model's image");
  assert.deepEqual(errors, []);
});

test("conversations survive a reload and can be switched and deleted", async (t) => {
  const { page, errors } = await open(t);
  await canned(page, (n) => "Reply number **" + n + "**\n\n```go\nfunc main() {}\n```");
  await say(page, "First conversation");
  await page.click("#new-chat");
  assert.equal(await page.locator(".msg").count(), 0);
  await say(page, "Second conversation");
  await say(page, "Second, again");
  assert.deepEqual(await page.locator("#chat-list .open").allTextContents(), ["Second conversation", "First conversation"]);

  await page.reload();
  await page.waitForSelector(".msg.assistant");
  assert.deepEqual(await page.locator(".msg.user .text").allTextContents(), ["Second conversation", "Second, again"]);
  assert.deepEqual(await page.locator(".msg.assistant strong").allTextContents(), ["2", "3"]);
  assert.equal(await page.locator(".msg.assistant pre code.language-go .hljs-keyword").first().textContent(), "func");
  assert.match(await page.locator(".msg.assistant .meta").first().textContent(), /stop/);
  assert.deepEqual(await page.locator("#chat-list .open").allTextContents(), ["Second conversation", "First conversation"]);
  assert.equal(await page.locator("#chat-list .active .open").textContent(), "Second conversation");

  await page.click("#chat-list .open >> text=First conversation");
  assert.deepEqual(await page.locator(".msg.user .text").allTextContents(), ["First conversation"]);
  assert.equal(await page.locator(".msg.assistant strong").textContent(), "1");
  // The conversation shown follows the switch across a reload too.
  await page.reload();
  await page.waitForSelector(".msg.assistant");
  assert.deepEqual(await page.locator(".msg.user .text").allTextContents(), ["First conversation"]);

  // Deleting another conversation leaves this one on screen ...
  await page.click('#chat-list li:has-text("Second conversation") .del');
  assert.deepEqual(await page.locator("#chat-list .open").allTextContents(), ["First conversation"]);
  assert.deepEqual(await page.locator(".msg.user .text").allTextContents(), ["First conversation"]);
  // ... deleting the one shown empties the page, and both stay gone.
  await page.click('#chat-list li:has-text("First conversation") .del');
  assert.equal(await page.locator(".msg").count(), 0);
  assert.equal(await page.isVisible("#empty"), true);
  await page.reload();
  await page.waitForSelector("#chat-list li.none", { state: "attached" });
  assert.equal(await page.locator("#chat-list .chat-item").count(), 0);
  assert.equal(await page.locator(".msg").count(), 0);

  // A conversation deleted while its reply streams (from the real server)
  // stays deleted: the stopped reply does not write it back.
  await page.unroute("**/v1/chat/completions");
  await page.fill("#s-max_tokens", "2000");
  await page.fill("#input", "Deleted mid-reply");
  await page.click("#send");
  await page.waitForFunction(() => {
    const a = document.querySelector(".msg.assistant");
    return a && ((a.querySelector(".text")?.textContent || "") + (a.querySelector(".rtext")?.textContent || "")).length > 0;
  }, null, { timeout: 60_000 });
  await page.click('#chat-list li:has-text("Deleted mid-reply") .del');
  await page.waitForSelector("body:not(.busy)");
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(await page.evaluate(() => localStorage.getItem("k3.chats")), "[]");
  assert.equal(await page.locator("#chat-list .chat-item").count(), 0);
  assert.deepEqual(errors, []);
});

test("copy, edit and regenerate act on one message", async (t) => {
  const { context, page, errors } = await open(t);
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: baseURL });
  const seen = await canned(page, (n) => "Answer " + n + " with `code`\n\n```js\nconst x = " + n + ";\n```");
  await say(page, "Question one");
  await say(page, "Question two");

  // Copy puts the reply's markdown source on the clipboard, and the code
  // block's own button just its code.
  await page.locator(".msg.assistant .act-copy").first().click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), "Answer 1 with `code`\n\n```js\nconst x = 1;\n```");
  await page.locator(".msg.assistant .copy-code").nth(1).click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), "const x = 2;");
  await page.locator(".msg.user .act-copy").first().click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), "Question one");

  // Regenerate on the first reply drops it and all after, and asks again
  // with only the first question.
  await page.locator(".msg.assistant .act-regen").first().click();
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant[data-index]").length === 1
    && !document.body.classList.contains("busy"));
  assert.deepEqual(seen[2].body.messages.map((m) => m.content), ["Question one"]);
  assert.deepEqual(await page.locator(".msg.user .text").allTextContents(), ["Question one"]);
  assert.match(await page.locator(".msg.assistant .text").textContent(), /^Answer 3 with code/);

  // Editing a question sends the edited text and replaces what followed.
  await say(page, "Question two");
  await page.locator(".msg.user .act-edit").first().click();
  await page.fill(".editbox textarea", "Question one, edited");
  await page.click(".edit-save");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant[data-index]").length === 1
    && !document.body.classList.contains("busy"));
  assert.deepEqual(seen[4].body.messages.map((m) => m.content), ["Question one, edited"]);
  assert.equal(seen[4].headers["content-type"], "application/json");
  assert.deepEqual(await page.locator(".msg.user .text").allTextContents(), ["Question one, edited"]);

  // Editing a reply changes its text in place, is kept, and sends nothing.
  await page.locator(".msg.assistant .act-edit").click();
  await page.fill(".editbox textarea", "A *better* answer");
  await page.click(".edit-save");
  assert.equal(await page.locator(".msg.assistant .text em").textContent(), "better");
  assert.equal(seen.length, 5);
  await page.reload();
  await page.waitForSelector(".msg.assistant");
  assert.equal(await page.locator(".msg.assistant .text").textContent(), "A better answer");
  // Cancel leaves the message as it was.
  await page.locator(".msg.user .act-edit").click();
  await page.fill(".editbox textarea", "never sent");
  await page.click(".edit-cancel");
  assert.equal(await page.locator(".editbox").count(), 0);
  assert.deepEqual(await page.locator(".msg.user .text").allTextContents(), ["Question one, edited"]);
  assert.equal(seen.length, 5);
  assert.deepEqual(errors, []);
});

test("an attached text file is read in the browser and sent in the message", async (t) => {
  const { page, errors } = await open(t);
  const seen = await canned(page, () => "Got it.");
  const file = "x = 1\nprint(```)\n";
  // The browser reads files asynchronously: wait for what reading shows.
  await page.setInputFiles("#file", { name: "notes.py", mimeType: "text/x-python", buffer: Buffer.from(file) });
  await page.waitForSelector("#attachments .chip");
  assert.match(await page.textContent("#attachments"), /notes\.py · 17 B/);
  // A binary file is refused with a note, not sent.
  await page.setInputFiles("#file", { name: "blob.bin", mimeType: "application/octet-stream", buffer: Buffer.from([1, 0, 2]) });
  await page.waitForFunction(() => document.getElementById("attach-note").textContent.includes("blob.bin"));
  assert.match(await page.textContent("#attach-note"), /blob\.bin is not a text file/);
  assert.equal(await page.locator("#attachments .chip").count(), 1);
  await say(page, "What does this do?");
  const sent = seen[0].body.messages.at(-1).content;
  assert.equal(sent, "What does this do?\n\nFile: notes.py\n````\nx = 1\nprint(```)\n````");
  assert.equal(await page.locator("#attachments .chip").count(), 0);
  assert.match(await page.textContent(".msg.user .files"), /notes\.py/);
  // A removed attachment is not sent; a file alone is a message.
  await page.setInputFiles("#file", [{ name: "a.txt", mimeType: "text/plain", buffer: Buffer.from("aaa") },
    { name: "b.txt", mimeType: "text/plain", buffer: Buffer.from("bbb") }]);
  await page.waitForFunction(() => document.querySelectorAll("#attachments .chip").length === 2);
  await page.click("#attachments .chip:has-text('a.txt') .unattach");
  await page.click("#send");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant[data-index]").length === 2);
  assert.equal(seen[1].body.messages.at(-1).content, "File: b.txt\n```\nbbb\n```");
  // The attachment is part of the kept conversation.
  await page.reload();
  await page.waitForSelector(".msg.user .files");
  assert.equal(await page.locator(".msg.user .file").count(), 2);
  assert.deepEqual(errors, []);
});

for (const [width, height] of [[360, 740], [320, 640]]) {
  test(`the page fits a ${width}x${height} phone screen`, async (t) => {
    const { page, errors } = await open(t, { viewport: { width, height } });
    await canned(page, () => MARKDOWN);
    // Side panels start closed, leaving the conversation the whole width.
    assert.equal(await page.isVisible("#settings"), false);
    assert.equal(await page.isVisible("#chats"), false);
    await say(page, "How do I count the lines of a file in Python?");
    const box = (sel) => page.locator(sel).first().boundingBox();
    const input = await box("#input");
    assert.ok(input.width >= width - 40, `input is ${input.width}px wide in a ${width}px viewport`);
    // Every header button is one line, and the header one row.
    for (const id of ["#toggle-chats", "#new-chat", "#toggle-settings"]) {
      const lines = await page.$eval(id, (b) => { const r = document.createRange(); r.selectNodeContents(b); return r.getClientRects().length; });
      assert.equal(lines, 1, id + " wraps");
    }
    const header = await box("header");
    assert.ok(header.height < 50, `header is ${header.height}px tall`);
    const send = await box("#send");
    assert.ok(send.x + send.width <= width && send.height < 40, JSON.stringify(send));
    // Nothing makes the page scroll sideways; a wide code line scrolls in its block.
    assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), true);
    const code = await box(".codeblock");
    assert.ok(code.x >= 0 && code.x + code.width <= width, JSON.stringify(code));
    // The chat list opens over the conversation and closes on a pick.
    await page.click("#toggle-chats");
    const list = await box("#chats");
    assert.ok(list.width <= width, JSON.stringify(list));
    await page.click("#chat-list .open");
    assert.equal(await page.isVisible("#chats"), false);
    if (width === 360) {
      await page.$eval("#conversation", (c) => { c.scrollTop = 0; });
      fs.mkdirSync(outDir, { recursive: true });
      await page.screenshot({ path: path.join(outDir, "phone-markdown.png") });
    }
    assert.deepEqual(errors, []);
  });
}
