// Drives Debian's chromium (headless, never a downloaded browser) through one spoken turn with the
// agent's page, for tests/agent/test_browser_e2e.py, which starts the agent and checks the result.
//
//   node browser.mjs URL MIC_WAV OUT_DIR
//
// The fake microphone plays MIC_WAV once (%noloop) from the moment the page opens it. The script
// clicks Connect, records the bot's received audio track (WebAudio, from the page's
// window.cadence.botStream) until RECORD_S after the page measured the turn's first bot audio,
// takes a screenshot, hangs up and writes OUT_DIR/result.json:
//   {events, turns, user_texts, bot_texts, latency_text, bot_peak_rms, mic_opened_at, ready_at,
//    rec_rate, rec_pcm16_b64, console}
// and OUT_DIR/page.png. Exits non-zero (with the reason on stderr) on any failure.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [url, micWav, outDir] = process.argv.slice(2);
const EXECUTABLE = process.env.CHROMIUM || "/usr/bin/chromium";
const TURN_TIMEOUT_MS = Number(process.env.E2E_TURN_TIMEOUT_MS || 90000);
const RECORD_S = 6;

// As the machine's notes say: no background traffic (the network is closed), no GPU, a fresh
// profile; the fake device and UI answer getUserMedia with MIC_WAV and no prompt.
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
  `--use-file-for-fake-audio-capture=${micWav}%noloop`, "--autoplay-policy=no-user-gesture-required"];

const profile = mkdtempSync(join(tmpdir(), "cadence-e2e-profile-"));
const consoleLines = [];
let context, page;
try {
  // A persistent context, so the profile is the fresh --user-data-dir made above.
  context = await chromium.launchPersistentContext(profile, { executablePath: EXECUTABLE, headless: true, args: ARGS });
  page = context.pages()[0] || (await context.newPage());
  page.on("console", (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => consoleLines.push(`pageerror: ${e.message}`));
  await page.goto(url);
  await page.waitForFunction(() => !document.getElementById("config").textContent.startsWith("loading"));
  await page.click("#connect");

  // Record the bot's track as soon as it arrives: 16-bit PCM at the context's rate.
  await page.waitForFunction(() => window.cadence.botStream !== null, null, { timeout: 30000 });
  await page.evaluate(() => {
    const ctx = new AudioContext();
    const source = ctx.createMediaStreamSource(window.cadence.botStream);
    const tap = ctx.createScriptProcessor(4096, 1, 1);
    const rec = { rate: ctx.sampleRate, chunks: [], ctx, recording: true };
    tap.onaudioprocess = (e) => { if (rec.recording) rec.chunks.push(new Float32Array(e.inputBuffer.getChannelData(0))); };
    source.connect(tap);
    tap.connect(ctx.destination);  // a ScriptProcessor runs only while connected to the output
    window.__rec = rec;
  });

  await page.waitForFunction(() => window.cadence.turns.length > 0, null, { timeout: TURN_TIMEOUT_MS });
  await page.waitForTimeout(RECORD_S * 1000);
  const pcm = await page.evaluate(() => {
    const rec = window.__rec;
    rec.recording = false;
    const n = rec.chunks.reduce((a, c) => a + c.length, 0);
    const out = new Int16Array(n);
    let i = 0;
    for (const c of rec.chunks) for (const v of c) out[i++] = Math.max(-32768, Math.min(32767, Math.round(v * 32767)));
    let bin = "";
    const bytes = new Uint8Array(out.buffer);
    for (let k = 0; k < bytes.length; k += 0x8000) bin += String.fromCharCode(...bytes.subarray(k, k + 0x8000));
    return { rate: rec.rate, b64: btoa(bin) };
  });
  await page.screenshot({ path: join(outDir, "page.png"), fullPage: true });
  const state = await page.evaluate(() => ({
    events: window.cadence.events,
    turns: window.cadence.turns,
    user_texts: [...document.querySelectorAll(".msg.user .text")].map((e) => e.textContent),
    bot_texts: [...document.querySelectorAll(".msg.bot .text")].map((e) => e.textContent),
    latency_text: document.getElementById("latency").textContent,
    bot_peak_rms: window.cadence.botPeakRms,
    mic_opened_at: window.cadence.micOpenedAt,
    ready_at: window.cadence.readyAt,
    config_error: window.cadence.configError,
    location_href: location.href,
  }));
  await page.click("#hangup");
  writeFileSync(join(outDir, "result.json"),
    JSON.stringify({ ...state, rec_rate: pcm.rate, rec_pcm16_b64: pcm.b64, console: consoleLines }));
} catch (e) {
  process.stderr.write(`browser.mjs: ${e.stack || e}\npage console:\n${consoleLines.join("\n")}\n`);
  process.exitCode = 1;
  if (page) {  // what the page showed when it failed
    await page.screenshot({ path: join(outDir, "page.png"), fullPage: true }).catch(() => {});
    const events = await page.evaluate(() => window.cadence && window.cadence.events).catch(() => null);
    process.stderr.write(`page events: ${JSON.stringify(events)}\n`);
  }
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
