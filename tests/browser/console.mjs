// Drives headless Chromium (Debian's /usr/bin/chromium) through the local console for
// tests/tests/console_browser.rs. Usage: node console.mjs <base-url> <screenshot-dir> '<steps JSON>'.
// Steps: {"goto": path} | {"click": selector} | {"fill": selector, "value": text}
//        | {"screenshot": file} | {"capture": name} | {"eval": js-expression, "as": name}
// Prints one JSON object: {"captures": {name: {html, text, images, scripts_run}}, "dialogs": [...]}.
// Every confirmation dialog is accepted (a button's confirmation) and recorded; an alert()
// from page content would be recorded too, so the test can assert none ran.
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
  viewport: { width: 1400, height: 420 },
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});
const dialogs = [];
const captures = {};
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on('dialog', async (d) => {
    dialogs.push({ type: d.type(), message: d.message() });
    await d.accept();
  });
  for (const step of steps) {
    if (step.goto !== undefined) {
      await page.goto(new URL(step.goto, base).toString(), { waitUntil: 'load' });
    } else if (step.click !== undefined) {
      await Promise.all([page.waitForNavigation({ waitUntil: 'load', timeout: 60000 }), page.click(step.click)]);
    } else if (step.fill !== undefined) {
      await page.fill(step.fill, step.value);
    } else if (step.screenshot !== undefined) {
      fs.mkdirSync(shots, { recursive: true });
      await page.screenshot({ path: path.join(shots, step.screenshot), fullPage: true });
    } else if (step.capture !== undefined) {
      captures[step.capture] = {
        url: page.url(),
        html: await page.content(),
        text: await page.evaluate(() => document.body.innerText),
        images: await page.evaluate(() => document.images.length),
      };
    } else if (step.eval !== undefined) {
      captures[step.as] = await page.evaluate(step.eval);
    } else {
      throw new Error(`unknown step ${JSON.stringify(step)}`);
    }
  }
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
console.log(JSON.stringify({ captures, dialogs }));
