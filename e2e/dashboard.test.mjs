// The dashboard in a real browser (issue 10): headless Debian chromium driven by
// playwright-core, against a running `berth up`. scripts/e2e starts the cluster and runs this
// with BERTH_ADDRESS (host:port) and BERTH_TOKEN set; BERTH_SCREENSHOT says where the picture
// of the Nodes page goes (default docs/dashboard.png).
//
// What it checks, as a person would do it:
//  1. the page asks for the token; a wrong one is refused in the page, the right one opens it;
//  2. on Nodes, a bad taint is refused in the page (alert region), not in the console;
//  3. a taint e2e=true added through the page is on the node (REST), and a new actor without
//     a toleration is not placed there (REST);
//  4. the page updates by itself (the actor's node shows its new actor count);
//  5. the taint removed through the page is gone (REST), and the same actor would now go to
//     the node again (REST dry run).
// No test framework: each step throws on failure; the process exits non-zero.

import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const address = process.env.BERTH_ADDRESS;
const token = process.env.BERTH_TOKEN;
const screenshot = resolve(process.env.BERTH_SCREENSHOT || join(here, '..', 'docs', 'dashboard.png'));
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const base = `http://${address}`;
const TAINT = 'e2e=true';
const STEP_MS = 20_000;
const TOTAL_MS = 180_000;

if (!address || !token) {
  console.error('dashboard.test.mjs: set BERTH_ADDRESS (host:port) and BERTH_TOKEN; scripts/e2e does');
  process.exit(2);
}

// A hard stop, whatever hangs.
const deadline = setTimeout(() => {
  console.error(`dashboard.test.mjs: gave up after ${TOTAL_MS / 1000} s`);
  process.exit(1);
}, TOTAL_MS);
deadline.unref();

let currentStep = '';
function step(text) {
  currentStep = text;
  console.log(`- ${text}`);
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

/** A REST call with the token; throws with the head's error body on a non-2xx answer. */
async function api(method, path, body) {
  const response = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** Polls `probe` until it returns a truthy value; throws `what` after STEP_MS. */
async function until(what, probe) {
  const end = Date.now() + STEP_MS;
  let last;
  while (Date.now() < end) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

const hasTaint = (node) => node.taints.some((t) => `${t.key}=${t.value}` === TAINT);

/**
 * The actor this test creates. It has no toleration, and a *soft* node affinity to `node`
 * with spill_on_unavailable: while `node` can take it, it goes there (so `node` is, without
 * doubt, the node it prefers, whatever the scoring and its seeded tie-breaks would say); when
 * `node` cannot (an untolerated taint), it spills to the DEFAULT placement over all nodes.
 * So "not on `node`" after the taint is the taint's doing, and nothing else's.
 */
function actorBody(node) {
  return {
    name: `e2e-${Date.now()}`,
    command: 'sleep',
    args: ['600'],
    resources: { CPU: 1 },
    scheduling_strategy: { type: 'NODE_AFFINITY', node_id: node, soft: true, spill_on_unavailable: true },
  };
}

/** Where the actor would go now: a dry run of its placement keys (nothing is reserved). */
async function wouldGo(node) {
  const { resources, scheduling_strategy } = actorBody(node);
  const answer = await api('POST', '/explain', { resources, scheduling_strategy });
  return answer.outcome === 'placed' ? answer.node_id : null;
}

async function main() {
  step(`cluster at ${base}`);
  const nodes = await until('at least two alive nodes', async () => {
    const list = await api('GET', '/nodes?state=ALIVE');
    return list.items.length >= 2 ? list.items : null;
  });
  // The node to taint: the first alive node without taints where the actor would go now
  // (the control: without the taint, it does go there).
  let target = null;
  for (const node of nodes.filter((n) => n.taints.length === 0)) {
    if ((await wouldGo(node.node_id)) === node.node_id) {
      target = node.node_id;
      break;
    }
  }
  check(target, `no untainted node takes the actor: ${JSON.stringify(nodes.map((n) => n.node_id))}`);
  step(`the node to taint: ${target} (the actor would go there now)`);

  const userDataDir = await mkdtemp(join(tmpdir(), 'berth-e2e-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--no-first-run',
    ],
    viewport: { width: 1280, height: 800 },
  });
  context.setDefaultTimeout(STEP_MS);
  // Errors belong in the page. The console may only carry the browser's own line for a
  // refused request and htmx's log of it; anything else (a script error, a CSP violation)
  // fails the test.
  const consoleErrors = [];
  let actorId = null;
  try {
    const page = context.pages()[0] || (await context.newPage());
    page.on('pageerror', (err) => consoleErrors.push(`page error: ${err.message}`));
    page.on('console', (msg) => {
      if (msg.type() !== 'error') return;
      const text = msg.text();
      const expected = /^Failed to load resource: the server responded with a status of 4\d\d/.test(text) ||
        /^Response Status Error Code 4\d\d from \/ui\//.test(text);
      if (!expected) consoleErrors.push(`${currentStep}: ${text}`);
    });

    step('open the dashboard; a wrong token is refused in the page');
    await page.goto(`${base}/`);
    const tokenField = page.getByLabel('Cluster token');
    await tokenField.fill('not-the-token');
    await page.getByRole('button', { name: 'Connect' }).click();
    const alert = page.getByRole('alert');
    // Empty, the region is not displayed (so not in the accessibility tree): read it by ID.
    const alertText = async () => (await page.locator('#alert').textContent()).trim();
    await alert.getByText('Token refused — enter it again').waitFor();
    await tokenField.waitFor();

    step('enter the token; the page reads the head\'s change stream');
    const watching = page.waitForResponse(
      (r) => r.url().includes('/api/v1/watch?listing=false') && r.status() === 200,
    );
    await tokenField.fill(token);
    await page.getByRole('button', { name: 'Connect' }).click();
    await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
    await watching;
    check((await alertText()) === '', 'the alert is cleared after connecting');

    step('go to Nodes');
    await page.getByRole('navigation', { name: 'Sections' }).getByRole('link', { name: 'Nodes' }).click();
    await page.getByRole('heading', { name: 'Nodes', level: 1 }).waitFor();
    const newTaint = page.getByLabel(`New taint on ${target}, as key=value`);
    const addForm = page.locator('form.add-taint', { has: newTaint });

    step('a bad taint is refused in the page');
    await newTaint.fill('bad key=x');
    await addForm.getByRole('button', { name: 'Add taint' }).click();
    await alert.getByText('Refused').waitFor();
    await newTaint.fill('');
    await newTaint.blur();

    step(`add the taint ${TAINT} to ${target} through the page`);
    await newTaint.fill(TAINT);
    await addForm.getByRole('button', { name: 'Add taint' }).click();
    const removeButton = page.getByRole('button', { name: `Remove taint ${TAINT} from ${target}` });
    await removeButton.waitFor();
    await page.getByRole('status').getByText(`Taint ${TAINT} added to ${target}.`).waitFor();
    check((await alertText()) === '', 'the earlier error is cleared by the next action');

    step('the REST API shows the taint');
    check(hasTaint(await api('GET', `/nodes/${target}`)), `${target} has no ${TAINT} taint`);

    step('a new actor without a toleration is placed, and not on the tainted node');
    const created = await api('POST', '/actors', actorBody(target));
    actorId = created.actor_id;
    const placed = await until(`${actorId} to be placed`, async () => {
      const actor = await api('GET', `/actors/${actorId}`);
      return actor.node_id ? actor : null;
    });
    check(placed.node_id !== target, `${actorId} was placed on the tainted node ${target}`);
    step(`${actorId} is on ${placed.node_id}`);

    step('the page updates by itself: the other node shows its actors');
    const count = (await api('GET', `/nodes/${placed.node_id}`)).actors;
    const row = page.locator(`tr[data-node="${placed.node_id}"]`);
    const actors = count === 1 ? '1 actor' : `${count} actors`;
    await row.getByRole('link', { name: actors, exact: true }).waitFor();

    step(`screenshot of the Nodes page: ${screenshot}`);
    await mkdir(dirname(screenshot), { recursive: true });
    await page.mouse.move(0, 0);
    // caret 'initial': Playwright's default hides the caret with an injected inline style,
    // which the page's CSP refuses (and this test would count as a console error).
    await page.screenshot({ path: screenshot, caret: 'initial' });

    step(`remove the taint ${TAINT} through the page`);
    await removeButton.click();
    await page.getByRole('status').getByText(`Taint ${TAINT} removed from ${target}`).waitFor();
    await removeButton.waitFor({ state: 'detached' });

    step('the REST API shows the taint gone, and the actor would go to the node again');
    check(!hasTaint(await api('GET', `/nodes/${target}`)), `${target} still has ${TAINT}`);
    check((await wouldGo(target)) === target, `without the taint the actor does not go to ${target}`);

    check(consoleErrors.length === 0, `errors in the console:\n${consoleErrors.join('\n')}`);
  } finally {
    if (actorId) await api('DELETE', `/actors/${actorId}`).catch(() => {});
    await context.close();
    await rm(userDataDir, { recursive: true, force: true });
  }
}

try {
  await main();
  console.log('1 passed, 0 failed');
  process.exit(0);
} catch (err) {
  console.error(`FAILED: ${err.stack || err}`);
  console.log('0 passed, 1 failed');
  process.exit(1);
}
