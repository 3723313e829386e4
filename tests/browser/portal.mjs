// Drives headless Chromium (Debian's /usr/bin/chromium) through the customer portal for
// tests/tests/portal_browser.rs. Usage: node portal.mjs <base-url> <screenshot-dir> '<steps JSON>'.
// Steps: {"goto": url-or-path} | {"click": selector} (waits for the navigation it starts)
//        | {"check": selector} | {"fill": selector, "value": text} | {"viewport": [w, h]}
//        | {"screenshot": file} | {"capture": name} | {"eval": js-expression, "as": name}
//        | {"frames": name} (each child frame: url, and its text when readable)
//        | {"frameClick": selector} (in the first child frame; waits for its navigation)
//        | {"tab": n, "as": name} (presses Tab n times, recording each focused element)
//        | {"cookies": name} (every cookie of the browser, with its partition key)
// Prints one JSON object: {"captures": {...}, "dialogs": [...], "console": [...]}. Any
// alert() from page content is recorded (and dismissed), so the test can assert none ran;
// console messages (a CSP violation among them) are recorded too.
import { chromium } from 'playwright-core';
import path from 'node:path';
import fs from 'node:fs';
import os from 'node:os';

const [base, shots, stepsJson] = process.argv.slice(2);
const steps = JSON.parse(stepsJson);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(executablePath)) {
  console.error(`chromium is required at ${executablePath} (make chromium installs Debian's package)`);
  process.exit(2);
}
const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-chromium-'));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  viewport: { width: 1100, height: 700 },
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});
const dialogs = [];
const consoleMessages = [];
const captures = {};
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on('dialog', async (d) => {
    dialogs.push({ type: d.type(), message: d.message() });
    await d.dismiss();
  });
  page.on('console', (m) => consoleMessages.push(m.text()));
  for (const step of steps) {
    if (step.goto !== undefined) {
      await page.goto(new URL(step.goto, base).toString(), { waitUntil: 'load' });
    } else if (step.click !== undefined) {
      await Promise.all([page.waitForNavigation({ waitUntil: 'load', timeout: 60000 }), page.click(step.click)]);
    } else if (step.frameClick !== undefined) {
      const frame = page.frames().find((f) => f !== page.mainFrame());
      if (!frame) throw new Error('frameClick: the page has no child frame');
      await Promise.all([frame.waitForNavigation({ waitUntil: 'load', timeout: 60000 }), frame.click(step.frameClick)]);
    } else if (step.check !== undefined) {
      await page.check(step.check);
    } else if (step.fill !== undefined) {
      await page.fill(step.fill, step.value);
    } else if (step.viewport !== undefined) {
      await page.setViewportSize({ width: step.viewport[0], height: step.viewport[1] });
    } else if (step.screenshot !== undefined) {
      fs.mkdirSync(shots, { recursive: true });
      await page.screenshot({ path: path.join(shots, step.screenshot), fullPage: true });
    } else if (step.capture !== undefined) {
      captures[step.capture] = {
        url: page.url(),
        html: await page.content(),
        text: await page.evaluate(() => document.body.innerText),
        images: await page.evaluate(() => document.images.length),
        scripts: await page.evaluate(() => document.scripts.length),
      };
    } else if (step.eval !== undefined) {
      captures[step.as] = await page.evaluate(step.eval);
    } else if (step.cookies !== undefined) {
      captures[step.cookies] = await context.cookies();
    } else if (step.frames !== undefined) {
      const out = [];
      for (const f of page.frames()) {
        if (f === page.mainFrame()) continue;
        let text = null;
        try { text = await f.evaluate(() => document.body ? document.body.innerText : ''); } catch (e) { text = null; }
        out.push({ url: f.url(), text });
      }
      captures[step.frames] = out;
    } else if (step.tab !== undefined) {
      const seen = [];
      for (let i = 0; i < step.tab; i++) {
        await page.keyboard.press('Tab');
        seen.push(await page.evaluate(() => {
          const e = document.activeElement;
          return e ? `${e.tagName.toLowerCase()}#${e.id}|${(e.textContent || e.getAttribute('name') || '').trim().slice(0, 40)}` : '';
        }));
      }
      captures[step.as] = seen;
    } else {
      throw new Error(`unknown step ${JSON.stringify(step)}`);
    }
  }
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
console.log(JSON.stringify({ captures, dialogs, console: consoleMessages }));
