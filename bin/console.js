// The web console's build: web/ (React + Vite) into dist/console/<fingerprint>/, the static files
// `keel serve` answers at / (src/platform/http/console.ts). Like bin/build.js for the server bundle,
// the fingerprint covers every file under web/ (its build output excepted), this file and the
// installed package set, so an edit or an `npm install` makes the next start rebuild instead of
// serving a stale console. Builds land in a scratch folder renamed into place, so two processes
// starting at once never serve a half-written console.
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fingerprintOf, ROOT } from './build.js';

const WEB = join(ROOT, 'web');
const OUT = join(ROOT, 'dist', 'console');
const KEEP_BUILDS = 2;
const SKIP = new Set(['node_modules', 'dist']);

function listFiles(dir, out = []) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) listFiles(path, out);
    else out.push(path);
  }
  return out;
}

/** The server's files the console imports (pure catalogues shared with it). */
const SHARED = ['src/event-types.ts'];

/** A short hash of what the console is made from: web/, the shared catalogues, this file and the installed packages. */
export function consoleFingerprint(root = ROOT) {
  return fingerprintOf(root, [...listFiles(join(root, 'web')), ...SHARED.map((f) => join(root, f)), fileURLToPath(import.meta.url), join(root, 'node_modules', '.package-lock.json')]);
}

/**
 * Builds the console for `print` into dist/console/<print>/ and removes older builds. Runs Vite in
 * this process: call it from `node bin/console.js` (NODE_ENV=production there), or through
 * ensureConsoleBuilt, which does that in a child process so the caller's NODE_ENV (a test runner's
 * `test`) never turns the build into React's development build.
 */
export async function buildConsole(print = consoleFingerprint()) {
  const { build } = await import('vite');
  const target = join(OUT, print);
  const scratch = join(OUT, `.building-${process.pid}-${Date.now()}`);
  await build({
    configFile: join(WEB, 'vite.config.ts'),
    root: WEB,
    logLevel: 'warn',
    build: { outDir: scratch, emptyOutDir: true },
  });
  writeFileSync(join(scratch, 'FINGERPRINT'), `${print}\n`);
  try {
    renameSync(scratch, target);
  } catch (err) {
    // Another process built the same fingerprint first: use theirs.
    rmSync(scratch, { recursive: true, force: true });
    if (!existsSync(join(target, 'index.html'))) throw err;
  }
  const builds = readdirSync(OUT)
    .filter((entry) => !entry.startsWith('.building-'))
    .map((entry) => ({ entry, mtime: statSync(join(OUT, entry)).mtimeMs }))
    .sort((a, b) => b.mtime - a.mtime);
  for (const { entry } of builds.slice(KEEP_BUILDS)) {
    if (entry !== print) rmSync(join(OUT, entry), { recursive: true, force: true });
  }
  return target;
}

/** The folder of the current console build, building it first when web/ changed. */
export async function ensureConsoleBuilt() {
  const print = consoleFingerprint();
  const dir = join(OUT, print);
  if (existsSync(join(dir, 'index.html'))) return dir;
  process.stderr.write('keel: web console changed, building dist/console/ ...\n');
  await new Promise((resolve, reject) => {
    execFile(process.execPath, [fileURLToPath(import.meta.url), print], { env: { ...process.env, NODE_ENV: 'production' } }, (err, _out, stderr) => {
      if (err) reject(new Error(`the console build failed: ${stderr.trim() || err.message}`));
      else resolve(undefined);
    });
  });
  return dir;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  // A production build whoever starts it (`npm run build`, or ensureConsoleBuilt with a fingerprint).
  process.env.NODE_ENV = 'production';
  const dir = await buildConsole(process.argv[2] ?? consoleFingerprint());
  process.stdout.write(`built ${relative(ROOT, dir)}\n`);
}
