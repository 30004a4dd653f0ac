// Opens the agent's page in Debian's chromium (headless) without a sign-in token, for
// tests/agent/test_browser_e2e.py: with API keys configured the page must say why it is refused and
// how to get in, both for its configuration and when Connect is pressed.
//
//   node signin.mjs URL OUT_JSON
//
// Writes {config_text, config_error, status, authorization_sent} to OUT_JSON; non-zero exit on failure.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [url, out] = process.argv.slice(2);
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"];
const profile = mkdtempSync(join(tmpdir(), "cadence-signin-profile-"));
let context;
try {
  context = await chromium.launchPersistentContext(profile, { executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
                                                              headless: true, args: ARGS });
  const page = context.pages()[0] || (await context.newPage());
  let authorizationSent = false;
  page.on("request", (r) => { if (r.headers()["authorization"]) authorizationSent = true; });
  await page.goto(url);
  await page.waitForFunction(() => window.cadence.configError !== null, null, { timeout: 30000 });
  await page.waitForFunction(() => !document.getElementById("connect").disabled, null, { timeout: 120000 });
  await page.click("#connect");
  await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("signalling failed"),
                             null, { timeout: 30000 });
  const result = await page.evaluate(() => ({
    config_text: document.getElementById("config").textContent,
    config_error: window.cadence.configError,
    status: document.getElementById("status").textContent,
  }));
  writeFileSync(out, JSON.stringify({ ...result, authorization_sent: authorizationSent }));
} catch (e) {
  process.stderr.write(`signin.mjs: ${e.message}\n`);
  process.exitCode = 1;
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
