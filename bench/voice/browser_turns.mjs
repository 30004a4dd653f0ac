// Drives Debian's chromium (headless, never a downloaded browser) through N spoken turns with the
// agent's own page, for bench/voice/browser.py.
//
//   PLAYWRIGHT_DIR=.../node_modules/playwright-core node browser_turns.mjs URL MIC_WAV TURNS OUT_JSON
//
// Chromium's fake microphone plays MIC_WAV once (%noloop) from the moment the page opens it: the
// questions with long silences between them (bench/voice/browser.py lays it out). The page
// measures each turn itself (window.cadence.turns); the script waits for TURNS turns, then for
// QUIET_MS of bot silence, and writes OUT_JSON:
// {turns, events, models_load_s, ready_at, mic_opened_at, console, timed_out}.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, micWav, turnsArg, outPath] = process.argv.slice(2);
const TURNS = Number(turnsArg);
const { chromium } = createRequire(import.meta.url)(process.env.PLAYWRIGHT_DIR || "playwright-core");
const EXECUTABLE = process.env.CHROMIUM || "/usr/bin/chromium";
const RUN_TIMEOUT_MS = Number(process.env.VOICE_RUN_TIMEOUT_MS || 600000);
const QUIET_MS = 1500;
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
  `--use-file-for-fake-audio-capture=${micWav}%noloop`, "--autoplay-policy=no-user-gesture-required"];

const profile = mkdtempSync(join(tmpdir(), "cadence-voice-bench-"));
const consoleLines = [];
let context, page, timedOut = false;
try {
  context = await chromium.launchPersistentContext(profile, { executablePath: EXECUTABLE, headless: true, args: ARGS });
  page = context.pages()[0] || (await context.newPage());
  page.on("console", (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => consoleLines.push(`pageerror: ${e.message}`));
  await page.goto(url);
  await page.click("#connect", { timeout: 180000 });  // enabled once /ready says the models are in
  await page.waitForFunction(() => window.cadence.readyAt !== null, null, { timeout: 60000 });
  try {
    await page.waitForFunction((n) => window.cadence.turns.length >= n, TURNS, { timeout: RUN_TIMEOUT_MS });
    await page.waitForFunction((quiet) => performance.now() - window.cadence.lastBotAudioAt > quiet,
      QUIET_MS, { timeout: 60000, polling: 100 });
  } catch (e) {
    consoleLines.push(`bench: timed out: ${e.message.split("\n")[0]}`);
    timedOut = true;
  }
  const state = await page.evaluate(() => ({
    turns: window.cadence.turns, events: window.cadence.events, models_load_s: window.cadence.modelsLoadS,
    ready_at: window.cadence.readyAt, mic_opened_at: window.cadence.micOpenedAt,
  }));
  await page.click("#hangup");
  writeFileSync(outPath, JSON.stringify({ ...state, console: consoleLines, timed_out: timedOut }));
} catch (e) {
  process.stderr.write(`browser_turns.mjs: ${e.stack || e}\npage console:\n${consoleLines.join("\n")}\n`);
  process.exitCode = 1;
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
