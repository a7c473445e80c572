// Live charts of the server's last ten minutes, from /status/history. The
// server keeps the samples (cumulative counters, one a second); this page
// turns neighbours into rates and draws them on canvases, with no library.
"use strict";

const $ = (id) => document.getElementById(id);
const windowMs = 10 * 60 * 1000;
let samples = [];

function authHeaders() {
  // The chat page keeps its settings (and the API key, if any) here.
  let key = "";
  try { key = (JSON.parse(localStorage.getItem("k3.settings") || "{}").api_key || "").trim(); } catch (_) { /* none */ }
  return key ? { Authorization: "Bearer " + key } : {};
}

// series turns samples into the points each chart draws: [t, value] pairs,
// value null where the interval says nothing (no requests for experts).
function series(s) {
  const out = { decode: [], disk: [], hits: [], wait: [], mem: [], budget: [] };
  for (let i = 1; i < s.length; i++) {
    const a = s[i - 1], b = s[i], dt = (b.t - a.t) / 1000;
    if (dt <= 0) continue;
    const lookups = (b.expert_cache_hits - a.expert_cache_hits) + (b.expert_cache_misses - a.expert_cache_misses);
    out.decode.push([b.t, Math.max(0, b.tokens - a.tokens) / dt]);
    out.disk.push([b.t, Math.max(0, b.storage_read_bytes - a.storage_read_bytes) / dt]);
    out.hits.push([b.t, lookups > 0 ? (b.expert_cache_hits - a.expert_cache_hits) / lookups : null]);
    out.wait.push([b.t, b.running > 0 || a.running > 0 ? Math.min(1, Math.max(0, b.storage_wait_seconds - a.storage_wait_seconds) / dt) : null]);
    out.mem.push([b.t, b.resident_bytes]);
    out.budget.push([b.t, b.memory_budget_bytes || null]);
  }
  return out;
}

function fmtBytes(n) {
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return (n >= 100 || i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + u[i];
}
const fmt = {
  decode: (v) => v.toFixed(v < 10 ? 2 : 1) + " tok/s",
  disk: (v) => fmtBytes(v) + "/s",
  hits: (v) => (100 * v).toFixed(0) + "%",
  wait: (v) => (100 * v).toFixed(0) + "%",
  mem: (v) => fmtBytes(v),
};

function css(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

// draw plots lines (each [points, colour]) on the section's canvas, y from
// 0 to max (fixed, or the data's), x over the last ten minutes.
function draw(id, lines, kind, fixedMax, nowValue) {
  const sec = $(id), cv = sec.querySelector("canvas");
  const w = cv.clientWidth || 600, h = cv.clientHeight || 150, dpr = window.devicePixelRatio || 1;
  if (cv.width !== Math.round(w * dpr)) { cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr); }
  const g = cv.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const now = samples.length ? samples[samples.length - 1].t : Date.now();
  let max = fixedMax || 0;
  if (!fixedMax) for (const [pts] of lines) for (const [, v] of pts) if (v != null && v > max) max = v;
  if (max <= 0) max = 1;
  const pad = 4, left = 64, plotW = w - left - pad, plotH = h - 2 * pad - 14;
  const x = (t) => left + plotW * (1 - (now - t) / windowMs), y = (v) => pad + plotH * (1 - v / max);
  g.strokeStyle = css("--line"); g.fillStyle = css("--muted"); g.lineWidth = 1; g.font = "11px system-ui, sans-serif";
  for (const f of [0, 0.5, 1]) {
    g.beginPath(); g.moveTo(left, y(f * max)); g.lineTo(left + plotW, y(f * max)); g.stroke();
    g.fillText(fmt[kind](f * max), 2, y(f * max) + 4);
  }
  for (const m of [10, 5, 0]) g.fillText(m ? "-" + m + " min" : "now", x(now - m * 60000) - (m ? 20 : 22), h - 2);
  for (const [pts, colour] of lines) {
    g.strokeStyle = colour; g.fillStyle = colour; g.lineWidth = 1.6; g.beginPath();
    let pen = false;
    pts.forEach(([t, v], i) => {
      if (v == null || now - t > windowMs) { pen = false; return; }
      if (pen) g.lineTo(x(t), y(v)); else g.moveTo(x(t), y(v));
      const next = pts[i + 1];
      if (!pen && (!next || next[1] == null)) g.fillRect(x(t) - 1.5, y(v) - 1.5, 3, 3); // a lone point
      pen = true;
    });
    g.stroke();
  }
  sec.querySelector(".now").textContent = nowValue == null ? "–" : fmt[kind](nowValue);
}

// recent is the figure each chart's title shows: rates over the last five
// seconds (one second is too jumpy for a decode of a few tokens a second),
// memory as last sampled.
function recent() {
  const b = samples[samples.length - 1];
  const a = samples.find((x) => x.t >= b.t - 5000 - 100);
  const dt = (b.t - a.t) / 1000;
  if (dt <= 0) return { mem: b.resident_bytes };
  const hits = b.expert_cache_hits - a.expert_cache_hits, lookups = hits + b.expert_cache_misses - a.expert_cache_misses;
  return {
    decode: (b.tokens - a.tokens) / dt,
    disk: (b.storage_read_bytes - a.storage_read_bytes) / dt,
    hits: lookups > 0 ? hits / lookups : null,
    wait: Math.min(1, (b.storage_wait_seconds - a.storage_wait_seconds) / dt),
    mem: b.resident_bytes,
  };
}

function render() {
  if (!samples.length) return;
  const s = series(samples), r = recent(), accent = css("--accent"), muted = css("--muted");
  draw("c-decode", [[s.decode, accent]], "decode", 0, r.decode);
  draw("c-disk", [[s.disk, accent]], "disk", 0, r.disk);
  draw("c-hits", [[s.hits, accent]], "hits", 1, r.hits);
  draw("c-wait", [[s.wait, accent]], "wait", 1, r.wait);
  draw("c-mem", [[s.mem, accent], [s.budget, muted]], "mem", 0, r.mem);
}

async function poll() {
  const since = samples.length ? samples[samples.length - 1].t : 0;
  try {
    const res = await fetch("status/history" + (since ? "?since=" + since : ""), { headers: authHeaders() });
    if (!res.ok) throw new Error("HTTP " + res.status);
    const body = await res.json();
    for (const x of body.samples) if (!samples.length || x.t > samples[samples.length - 1].t) samples.push(x);
    // Each answer ends with a sample taken on request, so samples are not
    // evenly spaced; rates divide by each interval's own length.
    const cut = samples[samples.length - 1].t - windowMs - 2000;
    while (samples.length && samples[0].t < cut) samples.shift();
    $("stats-state").textContent = "";
    render();
  } catch (e) {
    $("stats-state").textContent = "cannot reach the server (" + e.message + ")";
  }
}

async function modelName() {
  try {
    const res = await fetch("status", { headers: authHeaders() });
    const st = await res.json();
    $("model-name").textContent = st.model || "no model loaded";
  } catch (_) { /* the charts say it */ }
}

modelName();
poll();
setInterval(poll, 1000);
window.addEventListener("resize", render);
