// Shared setup: the server under test is K3_URL (default http://127.0.0.1:8080),
// with K3_API_KEY when it was started with --api-key.
import OpenAI from "openai";

export const baseURL = (process.env.K3_URL || "http://127.0.0.1:8080").replace(/\/$/, "");
export const apiKey = process.env.K3_API_KEY || "";

export const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: apiKey || "none", maxRetries: 0, timeout: 120_000 });

export async function raw(method, path, body, headers = {}) {
  const h = Object.assign({ "Content-Type": "application/json" }, headers);
  if (apiKey && !("Authorization" in h)) h.Authorization = "Bearer " + apiKey;
  const res = await fetch(baseURL + path, { method, headers: h, body });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

export async function modelID() {
  const list = await client.models.list();
  return list.data[0].id;
}

// firstWord is the first run of 2-4 ASCII letters/digits in s, or "".
export function firstWord(s) {
  const m = /[A-Za-z0-9]{2,4}/.exec(s);
  return m ? m[0] : "";
}
