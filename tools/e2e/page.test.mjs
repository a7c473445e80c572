// Opens the chat page in Debian's headless chromium, sends a message, waits
// for streamed text and a filled status bar, and writes a screenshot
// (K3_E2E_OUT, default ./out/page.png).
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

test("chat page streams a reply and fills the status bar", async () => {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "k3-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath, headless: true, viewport: { width: 1366, height: 800 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  try {
    const page = context.pages()[0] || await context.newPage();
    const outside = [];
    page.on("request", (r) => { if (!r.url().startsWith(baseURL)) outside.push(r.url()); });
    const errors = [];
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
    const meta = await page.textContent(".msg.assistant .meta");
    assert.match(meta, /tok\/s/);
    assert.equal(await page.isVisible("#regenerate:not([disabled])"), true);
    fs.mkdirSync(outDir, { recursive: true });
    await page.screenshot({ path: path.join(outDir, "page.png") });

    // Regenerate replaces the last reply with a new one.
    await page.click("#regenerate");
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
  } finally {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
});
