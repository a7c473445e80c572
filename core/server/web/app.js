// k3 chat page: plain JS, no dependencies, talks only to this server.
// markdown.js renders replies, chats.js keeps conversations in the browser.
"use strict";

const $ = (id) => document.getElementById(id);
const DEFAULTS = {
  system: "", thinking: true, temperature: 0.8, max_tokens: 512, top_k: 40, top_p: 0.95, min_p: 0.05,
  repeat_penalty: 1, presence_penalty: 0, frequency_penalty: 0, seed: "", stop: "", api_key: "",
};
const NUMERIC = ["temperature", "max_tokens", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"];
const MAX_FILE = 512 * 1024; // an attached file goes into the prompt whole

let chat = null;        // the conversation shown ({id, title, messages}); null until the first message
let pending = [];       // files attached to the message being written: {name, size, text}
let controller = null;  // AbortController of the running request
let liveRate = null;    // decode tokens/s of the stream in progress

const messages = () => (chat ? chat.messages : []);

function div(cls, text) {
  const n = document.createElement("div");
  n.className = cls;
  if (text !== undefined) n.textContent = text;
  return n;
}
function button(cls, text, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = cls;
  b.textContent = text;
  if (title) b.title = title;
  return b;
}

// ---- settings ----
function loadSettings() {
  let saved = {};
  try { saved = JSON.parse(localStorage.getItem("k3.settings") || "{}"); } catch (_) { /* fresh start */ }
  const s = Object.assign({}, DEFAULTS, saved);
  for (const k of Object.keys(DEFAULTS)) {
    const el = $("s-" + k);
    if (el.type === "checkbox") el.checked = !!s[k]; else el.value = s[k];
  }
}
function readSettings() {
  const s = {};
  for (const k of Object.keys(DEFAULTS)) {
    const el = $("s-" + k);
    s[k] = el.type === "checkbox" ? el.checked : el.value;
  }
  return s;
}
function saveSettings() { localStorage.setItem("k3.settings", JSON.stringify(readSettings())); }

function authHeaders() {
  const key = $("s-api_key").value.trim();
  return key ? { Authorization: "Bearer " + key } : {};
}

// apiContent is a user message as the model sees it: its text, then each
// attached file in a fence longer than any backtick run inside it.
function apiContent(m) {
  let s = m.content || "";
  for (const f of m.files || []) {
    const runs = f.text.match(/`+/g) || [];
    const fence = "`".repeat(Math.max(3, ...runs.map((r) => r.length + 1)));
    s += (s ? "\n\n" : "") + "File: " + f.name + "\n" + fence + "\n" + f.text.replace(/\n$/, "") + "\n" + fence;
  }
  return s;
}

function requestBody() {
  const s = readSettings();
  const body = { messages: [], stream: true, stream_options: { include_usage: true },
    chat_template_kwargs: { thinking: s.thinking, enable_thinking: s.thinking } };
  if (s.system.trim()) body.messages.push({ role: "system", content: s.system });
  for (const m of messages()) {
    const out = { role: m.role, content: m.role === "user" ? apiContent(m) : m.content };
    if (m.reasoning_content) out.reasoning_content = m.reasoning_content;
    if (m.tool_calls) out.tool_calls = m.tool_calls;
    body.messages.push(out);
  }
  for (const k of NUMERIC) {
    if (s[k] !== "" && !isNaN(Number(s[k]))) body[k] = Number(s[k]);
  }
  if (s.seed !== "" && !isNaN(Number(s.seed))) body.seed = Number(s.seed);
  const stops = s.stop.split("\n").filter((x) => x !== "");
  if (stops.length) body.stop = stops;
  return body;
}

// ---- conversation view ----
// messageView shows m; index is its place in the conversation, undefined
// for a reply still streaming (or one that failed before any text).
function messageView(m, index) {
  $("empty").hidden = true;
  const el = div("msg " + m.role);
  if (index !== undefined) el.dataset.index = index;
  el.appendChild(div("who", m.role === "user" ? "You" : "Assistant"));
  el.appendChild(div("parts"));
  el.appendChild(div(m.role === "assistant" ? "text md" : "text"));
  if (m.reasoning_content) {
    const r = reasoningBox(el);
    r.open = false;
    r.querySelector(".rtext").textContent = m.reasoning_content;
    r.querySelector("summary").textContent = "Reasoning (" + m.reasoning_content.length + " chars)";
  }
  if (m.tool_calls) renderCalls(el, m.tool_calls);
  showText(el, m.content);
  if (m.files && m.files.length) {
    const box = el.appendChild(div("files"));
    for (const f of m.files) box.appendChild(div("file", "📄 " + f.name + " · " + fmtBytes(f.size))).title = f.text.slice(0, 400);
  }
  if (m.meta) el.appendChild(div("meta", m.meta));
  const acts = el.appendChild(div("actions"));
  acts.appendChild(button("act-copy", "Copy", "Copy this message"));
  acts.appendChild(button("act-edit", "Edit", m.role === "user" ? "Edit and send again" : "Edit this reply"));
  if (m.role === "assistant") acts.appendChild(button("act-regen", "Regenerate", "Answer again from here"));
  $("conversation").appendChild(el);
  scrollDown(true);
  return el;
}

function showText(el, text) {
  const t = el.querySelector(".text");
  if (t.classList.contains("md")) t.replaceChildren(Markdown.render(text || ""));
  else t.textContent = text || "";
}

function renderConversation() {
  $("conversation").querySelectorAll(".msg").forEach((n) => n.remove());
  messages().forEach((m, i) => messageView(m, i));
  $("empty").hidden = messages().length > 0;
}

function reasoningBox(el) {
  let d = el.querySelector("details.reasoning");
  if (!d) {
    d = document.createElement("details");
    d.className = "reasoning";
    d.open = true;
    d.appendChild(document.createElement("summary")).textContent = "Reasoning";
    d.appendChild(div("rtext"));
    el.querySelector(".parts").appendChild(d);
  }
  return d;
}

function renderCalls(el, calls) {
  const box = el.querySelector(".parts");
  box.querySelectorAll(".toolcall").forEach((n) => n.remove());
  for (const c of calls) box.appendChild(div("toolcall", "→ " + c.function.name + "(" + c.function.arguments + ")"));
}

function nearBottom() {
  const c = $("conversation");
  return c.scrollHeight - c.scrollTop - c.clientHeight < 80;
}
function scrollDown(force) {
  const c = $("conversation");
  if (force || nearBottom()) c.scrollTop = c.scrollHeight;
}

// ---- streaming ----
async function* sseData(response) {
  const reader = response.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of event.split("\n")) {
        if (line.startsWith("data: ")) yield line.slice(6);
      }
    }
  }
}

// generate streams the reply to the conversation shown and appends it there
// (even when the user has switched away meanwhile, which stops it).
async function generate() {
  const convo = chat;
  const el = messageView({ role: "assistant", content: "" });
  el.classList.add("streaming");
  const reply = { role: "assistant", content: "", reasoning_content: "" };
  const calls = [];
  let drawing = false;
  const draw = () => { drawing = false; showText(el, reply.content); scrollDown(false); };
  setBusy(true);
  controller = new AbortController();
  let started = 0, tokens = 0, finish = null, timings = null;
  try {
    const res = await fetch("v1/chat/completions", {
      method: "POST", signal: controller.signal,
      headers: Object.assign({ "Content-Type": "application/json" }, authHeaders()),
      body: JSON.stringify(requestBody()),
    });
    if (!res.ok) {
      let msg = res.status + " " + res.statusText;
      try { msg = (await res.json()).error.message; } catch (_) { /* not JSON */ }
      if (res.status === 401) msg += " — set the API key in Settings.";
      throw new Error(msg);
    }
    for await (const data of sseData(res)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.timings) timings = chunk.timings;
      const ch = chunk.choices && chunk.choices[0];
      if (!ch) continue;
      if (ch.finish_reason) finish = ch.finish_reason;
      const d = ch.delta || {};
      if (d.reasoning_content || d.content || d.tool_calls) {
        tokens++;
        if (!started) started = performance.now();
        const secs = (performance.now() - started) / 1000;
        if (secs > 0.2) { liveRate = (tokens - 1) / secs; $("st-decode").textContent = liveRate.toFixed(1); }
      }
      if (d.reasoning_content) {
        reply.reasoning_content += d.reasoning_content;
        reasoningBox(el).querySelector(".rtext").textContent = reply.reasoning_content;
      }
      if (d.content) {
        reply.content += d.content;
        if (!drawing) { drawing = true; requestAnimationFrame(draw); }
        const r = el.querySelector("details.reasoning");
        if (r && r.open && !r.dataset.touched) r.open = false;
      }
      for (const tc of d.tool_calls || []) {
        const c = calls[tc.index] || (calls[tc.index] = { id: tc.id, type: "function", function: { name: "", arguments: "" } });
        if (tc.function && tc.function.name) c.function.name = tc.function.name;
        if (tc.function && tc.function.arguments) c.function.arguments += tc.function.arguments;
        renderCalls(el, calls);
      }
      scrollDown(false);
    }
  } catch (err) {
    if (err.name !== "AbortError") el.appendChild(div("error", "Error: " + err.message));
    else finish = "stopped";
  } finally {
    el.classList.remove("streaming");
    controller = null;
    liveRate = null;
    setBusy(false);
  }
  showText(el, reply.content);
  const r = el.querySelector("details.reasoning");
  if (r) r.querySelector("summary").textContent = "Reasoning (" + reply.reasoning_content.length + " chars)";
  const parts = [];
  if (finish) parts.push(finish);
  if (timings) {
    parts.push(timings.prompt_n + " prompt tok @ " + timings.prompt_per_second.toFixed(1) + " tok/s");
    parts.push(timings.predicted_n + " tok @ " + timings.predicted_per_second.toFixed(1) + " tok/s");
    if (timings.cache_n) parts.push(timings.cache_n + " cached");
  }
  el.insertBefore(div("meta", parts.join(" · ")), el.querySelector(".actions"));
  if (calls.length) reply.tool_calls = calls;
  if (!reply.reasoning_content) delete reply.reasoning_content;
  if ((reply.content || reply.reasoning_content || calls.length) && !convo.deleted) {
    reply.meta = parts.join(" · ");
    convo.messages.push(reply);
    el.dataset.index = convo.messages.length - 1;
    persist(convo);
  }
  refreshStatus();
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  document.body.classList.toggle("busy", busy);
}

function send(ev) {
  if (ev) ev.preventDefault();
  if (controller) return;
  const text = $("input").value;
  if (!text.trim() && !pending.length) return;
  if (!chat) chat = Chats.create(text.trim() ? text : pending[0].name);
  const m = { role: "user", content: text };
  if (pending.length) m.files = pending;
  pending = [];
  renderPending();
  $("input").value = "";
  autosize();
  chat.messages.push(m);
  persist(chat);
  messageView(m, chat.messages.length - 1);
  generate();
}

// regenerateAt drops message i and everything after it, and answers the
// user message before it again.
function regenerateAt(i) {
  if (controller || !chat) return;
  chat.messages.length = Math.min(i, chat.messages.length);
  persist(chat);
  renderConversation();
  const last = chat.messages[chat.messages.length - 1];
  if (last && last.role === "user") generate();
}

// editAt opens message i for editing in place. Saving a user message drops
// what followed it and asks again; saving a reply only changes its text.
function editAt(el, i) {
  if (controller || el.querySelector(".editbox")) return;
  const m = chat.messages[i];
  const text = el.querySelector(".text");
  const box = div("editbox");
  const ta = box.appendChild(document.createElement("textarea"));
  ta.value = m.content || "";
  ta.rows = Math.min(12, ta.value.split("\n").length + 1);
  const row = box.appendChild(div("editbuttons"));
  const save = row.appendChild(button("primary edit-save", m.role === "user" ? "Save & send" : "Save"));
  const cancel = row.appendChild(button("edit-cancel", "Cancel"));
  text.hidden = true;
  text.after(box);
  ta.focus();
  cancel.addEventListener("click", () => { box.remove(); text.hidden = false; });
  save.addEventListener("click", () => {
    if (controller) return;
    m.content = ta.value;
    if (m.role === "user") {
      chat.messages.length = i + 1;
      persist(chat);
      renderConversation();
      generate();
    } else {
      persist(chat);
      renderConversation();
    }
  });
}

async function copyText(text, btn) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) { // no clipboard API (plain http on another host): the old way
    const t = document.createElement("textarea");
    t.value = text;
    document.body.appendChild(t);
    t.select();
    document.execCommand("copy");
    t.remove();
  }
  const old = btn.textContent;
  btn.textContent = "Copied";
  setTimeout(() => { btn.textContent = old; }, 1200);
}

function onConversationClick(e) {
  const b = e.target.closest("button");
  if (!b) return;
  if (b.classList.contains("copy-code")) {
    copyText(b.closest(".codeblock").querySelector("code").textContent, b);
    return;
  }
  const el = b.closest(".msg");
  if (!el) return;
  const i = el.dataset.index === undefined ? messages().length : Number(el.dataset.index);
  const m = messages()[i];
  if (b.classList.contains("act-copy")) copyText(m ? (m.role === "user" ? apiContent(m) : m.content) : el.querySelector(".text").textContent, b);
  else if (b.classList.contains("act-edit") && m) editAt(el, i);
  else if (b.classList.contains("act-regen")) regenerateAt(i);
}

// ---- conversations ----
function persist(convo) {
  try {
    if (Chats.save(convo)) notice("Browser storage was full: the oldest conversations were dropped.");
  } catch (_) {
    notice("This conversation is too large to keep in the browser's storage.");
  }
  if (convo === chat) Chats.setCurrent(chat.id);
  renderChatList();
}

function notice(text) {
  const n = $("attach-note");
  n.textContent = text;
  clearTimeout(notice.timer);
  notice.timer = setTimeout(() => { n.textContent = ""; }, 6000);
}

function renderChatList() {
  const ul = $("chat-list");
  ul.replaceChildren();
  const all = Chats.list();
  for (const c of all) {
    const li = document.createElement("li");
    li.className = "chat-item" + (chat && c.id === chat.id ? " active" : "");
    li.dataset.id = c.id;
    const open = li.appendChild(button("open", c.title));
    open.title = c.title + " · " + new Date(c.updated).toLocaleString();
    li.appendChild(button("del", "×", "Delete this conversation")).setAttribute("aria-label", "Delete " + c.title);
    ul.appendChild(li);
  }
  if (!all.length) ul.appendChild(document.createElement("li")).className = "none";
}

function switchTo(id) {
  if (controller) controller.abort();
  chat = Chats.get(id);
  Chats.setCurrent(chat ? chat.id : null);
  renderConversation();
  renderChatList();
  if (window.innerWidth < 900) toggle("chats", false);
}

function deleteChat(id) {
  if (chat && chat.id === id) {
    chat.deleted = true; // a reply being stopped must not bring it back
    if (controller) controller.abort();
    chat = null;
  }
  Chats.remove(id);
  if (!chat) renderConversation();
  renderChatList();
}

function newChat() {
  if (controller) controller.abort();
  chat = null;
  Chats.setCurrent(null);
  renderConversation();
  renderChatList();
  setBusy(false);
  if (window.innerWidth < 900) toggle("chats", false);
  $("input").focus();
}

// ---- attachments ----
async function attach(files) {
  for (const f of files) {
    if (f.size > MAX_FILE) { notice(f.name + " is too large: " + fmtBytes(f.size) + ", at most 512 KiB of text."); continue; }
    const text = await f.text();
    if (text.includes("\u0000")) { notice(f.name + " is not a text file."); continue; }
    pending.push({ name: f.name, size: f.size, text });
  }
  $("file").value = "";
  renderPending();
}

function renderPending() {
  const box = $("attachments");
  box.replaceChildren();
  pending.forEach((f, i) => {
    const chip = box.appendChild(div("chip"));
    chip.appendChild(document.createElement("span")).textContent = "📄 " + f.name + " · " + fmtBytes(f.size);
    const x = chip.appendChild(button("unattach", "×", "Remove " + f.name));
    x.addEventListener("click", () => { pending.splice(i, 1); renderPending(); });
  });
  box.hidden = !pending.length;
}

function autosize() {
  const t = $("input");
  t.style.height = "auto";
  t.style.height = Math.min(t.scrollHeight, window.innerHeight * 0.4) + "px";
}

// toggle shows or hides a side panel (chats or settings).
function toggle(id, show) {
  const a = $(id);
  a.hidden = show === undefined ? !a.hidden : !show;
  $("toggle-" + id).setAttribute("aria-expanded", String(!a.hidden));
}

// ---- status bar ----
function fmtBytes(n) {
  if (!n) return "0";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return n.toFixed(n < 10 && i ? 1 : 0) + " " + u[i];
}

async function refreshStatus() {
  const state = $("st-state");
  try {
    const res = await fetch("status", { headers: authHeaders() });
    if (res.status === 401) { state.className = "stat down"; state.querySelector("b").textContent = "API key needed"; return; }
    const s = await res.json();
    state.className = "stat " + (s.ready ? "ready" : "");
    state.querySelector("b").textContent = s.ready ? (s.requests_processing ? "generating" : "ready") : "loading model";
    if (s.model) { $("model-name").textContent = s.model + " · ctx " + s.context_length; $("empty-model").textContent = s.model; }
    if (s.requests_total > 0) {
      $("st-prefill").textContent = s.last_prefill_tokens_per_second.toFixed(1);
      if (liveRate === null) $("st-decode").textContent = s.last_decode_tokens_per_second.toFixed(1);
    }
    const lookups = s.expert_cache_hits + s.expert_cache_misses;
    $("st-hits").textContent = lookups ? (100 * s.expert_cache_hit_rate).toFixed(1) + "% hit" : "no cache";
    $("st-mem").textContent = fmtBytes(s.resident_bytes) + (s.memory_budget_bytes ? " / " + fmtBytes(s.memory_budget_bytes) : "");
    const bar = $("st-membar");
    const frac = s.memory_budget_bytes ? s.resident_bytes / s.memory_budget_bytes : 0;
    bar.style.width = Math.min(100, 100 * frac).toFixed(1) + "%";
    bar.classList.toggle("over", frac > 1);
    $("st-queue").textContent = s.requests_processing + " / " + s.requests_deferred;
  } catch (_) {
    state.className = "stat down";
    state.querySelector("b").textContent = "server unreachable";
  }
}

// ---- wiring ----
loadSettings();
$("composer").addEventListener("submit", send);
$("input").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey && !e.isComposing) send(e); });
$("input").addEventListener("input", autosize);
$("stop").addEventListener("click", () => controller && controller.abort());
$("new-chat").addEventListener("click", newChat);
$("toggle-settings").addEventListener("click", () => toggle("settings"));
$("toggle-chats").addEventListener("click", () => toggle("chats"));
$("attach").addEventListener("click", () => $("file").click());
$("file").addEventListener("change", () => attach([...$("file").files]));
$("settings").addEventListener("change", saveSettings);
$("reset-settings").addEventListener("click", () => { localStorage.removeItem("k3.settings"); loadSettings(); });
$("conversation").addEventListener("toggle", (e) => { if (e.target.matches("details.reasoning")) e.target.dataset.touched = "1"; }, true);
$("conversation").addEventListener("click", onConversationClick);
$("chat-list").addEventListener("click", (e) => {
  const li = e.target.closest("li.chat-item");
  if (!li) return;
  if (e.target.closest("button.del")) deleteChat(li.dataset.id);
  else switchTo(li.dataset.id);
});
window.addEventListener("storage", (e) => { if (e.key === "k3.chats") renderChatList(); });
if (window.innerWidth < 900) { toggle("settings", false); toggle("chats", false); }
if (window.innerWidth < 600) $("input").placeholder = "Message";
chat = Chats.get(Chats.currentID());
renderConversation();
renderChatList();
setBusy(false);
refreshStatus();
setInterval(refreshStatus, 2000);
$("input").focus();
