// What the end-to-end tests share: starting tools/mock-llm and sluice on
// ephemeral ports (their "... listening on" lines give the ports; no sleeps),
// stopping them, and reading sluice's Prometheus metrics.
//
//   SLUICE_BUILD_DIR=/path/to/build     (default: ../../../build)

import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdtempSync, writeFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const HERE = dirname(fileURLToPath(import.meta.url));
const BUILD = resolve(process.env.SLUICE_BUILD_DIR ?? join(HERE, '..', '..', '..', 'build'));
const SLUICE_BIN = join(BUILD, 'sluice');
const MOCK_BIN = join(BUILD, 'tools', 'mock-llm');

const STARTUP_TIMEOUT_MS = 10_000;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------
// Child processes.
const children = [];
const tmpDirs = [];

const running = (child) => child.exitCode === null && child.signalCode === null;

function killAll() {
  for (const child of children) {
    if (running(child)) {
      try { child.kill('SIGKILL'); } catch { /* already gone */ }
    }
  }
}

// SIGTERM first (lets an instrumented build flush coverage, and sluice drains
// with nothing in flight), SIGKILL whatever is still there after 3 s.
export async function stopAll() {
  const exits = children.filter(running).map((child) => new Promise((r) => {
    child.once('exit', r);
    try { child.kill('SIGTERM'); } catch { r(); }
  }));
  await Promise.race([Promise.all(exits), new Promise((r) => setTimeout(r, 3_000).unref())]);
  killAll();
  for (const dir of tmpDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}
// Last line of defence if the test process dies without running after().
process.on('exit', killAll);

// Starts `bin args`, resolves with the captures of each pattern once every
// pattern has matched a stdout line. Rejects on timeout or early exit, with
// the child's stderr in the message.
export function startProcess(name, bin, args, patterns) {
  if (!existsSync(bin)) {
    throw new Error(`${name}: ${bin} not found (build it, or set SLUICE_BUILD_DIR)`);
  }
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-8192); });
  child.stderrText = () => stderr;

  return new Promise((resolvePromise, reject) => {
    const found = new Array(patterns.length).fill(null);
    const lines = createInterface({ input: child.stdout });
    const fail = (why) => {
      clearTimeout(timer);
      lines.close();
      reject(new Error(`${name}: ${why}\n--- ${name} stderr ---\n${stderr}`));
    };
    const timer = setTimeout(() => fail(`no startup line within ${STARTUP_TIMEOUT_MS} ms`),
                             STARTUP_TIMEOUT_MS);
    child.on('error', (err) => fail(`spawn failed: ${err.message}`));
    child.on('exit', (code, signal) => fail(`exited early (code ${code}, signal ${signal})`));
    lines.on('line', (line) => {
      patterns.forEach((re, i) => {
        const m = found[i] === null && re.exec(line);
        if (m) found[i] = m;
      });
      if (found.every((m) => m !== null)) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        // Keep draining stdout so the child never blocks on a full pipe.
        resolvePromise({ child, matches: found });
      }
    });
  });
}

/** Starts tools/mock-llm on 127.0.0.1:0; resolves with its base URL. */
export async function startMock() {
  const mock = await startProcess('mock-llm', MOCK_BIN, ['--listen', '127.0.0.1:0'],
                                  [/^mock-llm listening on (\S+):(\d+)$/]);
  return `http://127.0.0.1:${mock.matches[0][2]}`;
}

/**
 * Starts sluice with `yaml` (without the listen/admin/workers lines, which
 * this adds: 127.0.0.1:0, one worker). Resolves with { url, adminUrl, child }.
 */
export async function startSluice(yaml) {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-e2e-sdk-'));
  tmpDirs.push(dir);
  const config = join(dir, 'sluice.yaml');
  writeFileSync(config, `version: 1
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
${yaml}`);
  const sluice = await startProcess('sluice', SLUICE_BIN, ['--config', config], [
    /^sluice listening on (\S+):(\d+)$/,
    /^sluice admin on (\S+):(\d+)$/,
  ]);
  return {
    child: sluice.child,
    url: `http://127.0.0.1:${sluice.matches[0][2]}`,
    adminUrl: `http://127.0.0.1:${sluice.matches[1][2]}`,
  };
}

// Value of one Prometheus sample whose labels include all of `labels`
// (in any order); 0 if the series does not exist.
export async function metric(adminUrl, name, labels) {
  const res = await fetch(`${adminUrl}/metrics`);
  assert.equal(res.status, 200, 'GET /metrics');
  const text = await res.text();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) got[l[1]] = l[2];
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(m[3]);
  }
  return 0;
}

// Polls until the counter reaches `want` (it is bumped on sluice's worker
// thread, which may lag the client by a moment); returns the last value.
export async function waitMetric(adminUrl, name, labels, want, timeoutMs = 2_000) {
  const deadline = Date.now() + timeoutMs;
  let v;
  while ((v = await metric(adminUrl, name, labels)) < want && Date.now() < deadline) await sleep(5);
  return v;
}
