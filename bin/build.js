// Keel's build: bundles src/main.ts (and the packages it uses, except those listed in EXTERNAL)
// into dist/<fingerprint>/ with esbuild. `npm start` and `npx keel` run the bundle: it starts in
// about half the time of transpiling src/ through tsx on every start (bench/startup.ts).
//
// The fingerprint covers every file under src/, this file and the installed package set, so an
// edit or an `npm install` makes the next start rebuild (about half a second) instead of running
// stale code. Builds land in a fresh folder named by the fingerprint, then are renamed into place,
// so two processes starting at once never see a half-written bundle.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const DIST = join(ROOT, 'dist');
/** Builds kept in dist/ (the newest first), so a server started from an earlier one keeps working. */
const KEEP_BUILDS = 3;

// Packages left to node's resolver: native addons, packages that read files beside their own code
// (PGlite's WASM, swagger-ui's assets, pino's workers) and those loaded only for some requests.
const EXTERNAL = [
  '@electric-sql/pglite',
  '@electric-sql/pglite/*',
  '@node-rs/argon2',
  'pg',
  'pino',
  'ioredis',
  'nodemailer',
  'swagger-ui-dist',
  '@simplewebauthn/server',
  'libphonenumber-js',
  'libphonenumber-js/*',
  'otplib',
  'qrcode',
  '@zxcvbn-ts/*',
  // Large and used only by outbound requests (webhooks, SSO, releases).
  'undici',
  // Loaded only with METRICS_ENABLED.
  'prom-client',
  // The OpenTelemetry SDK, loaded only when tracing is on (src/platform/tracing/); the API stays bundled.
  '@opentelemetry/sdk-trace',
  '@opentelemetry/context-async-hooks',
  '@opentelemetry/core',
  '@opentelemetry/exporter-trace-otlp-proto',
  '@opentelemetry/resources',
];

function listFiles(dir, out = []) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) listFiles(path, out);
    else if (!entry.name.endsWith('.test.ts')) out.push(path);
  }
  return out;
}

/** A short hash of `inputs`' paths (relative to `root`), sizes and modification times; a missing file counts too. */
export function fingerprintOf(root, inputs) {
  const hash = createHash('sha256');
  for (const file of [...inputs].sort()) {
    let stamp = 'missing';
    try {
      const st = statSync(file);
      stamp = `${st.size}:${st.mtimeMs}`;
    } catch {
      // a missing input is part of the fingerprint too
    }
    hash.update(`${relative(root, file)}\0${stamp}\n`);
  }
  return hash.digest('hex').slice(0, 16);
}

/** A short hash of what the bundle is made from: sources, this file and the installed packages. */
export function fingerprint(root = ROOT) {
  return fingerprintOf(root, [...listFiles(join(root, 'src')), fileURLToPath(import.meta.url), join(root, 'node_modules', '.package-lock.json')]);
}

/** Builds the bundle for `print` into dist/<print>/ and removes older builds. */
export async function build(print = fingerprint()) {
  const { build: esbuild } = await import('esbuild');
  const target = join(DIST, print);
  const scratch = join(DIST, `.building-${process.pid}-${Date.now()}`);
  await esbuild({
    absWorkingDir: ROOT,
    entryPoints: ['src/main.ts'],
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    external: EXTERNAL,
    outdir: scratch,
    chunkNames: 'chunks/[name]-[hash]',
    sourcemap: 'linked',
    logLevel: 'error',
    // CommonJS packages inside the bundle may call require() for node's built-ins.
    banner: { js: "import { createRequire as __keelRequire } from 'node:module'; const require = __keelRequire(import.meta.url);" },
  });
  writeFileSync(join(scratch, 'FINGERPRINT'), `${print}\n`);
  try {
    renameSync(scratch, target);
  } catch (err) {
    // Another process built the same fingerprint first: use theirs.
    rmSync(scratch, { recursive: true, force: true });
    if (!existsSync(join(target, 'main.js'))) throw err;
  }
  // Older builds go, but not the last few: a process still running one loads its chunks on demand.
  const builds = readdirSync(DIST)
    .filter((entry) => !entry.startsWith('.building-'))
    .map((entry) => ({ entry, mtime: statSync(join(DIST, entry)).mtimeMs }))
    .sort((a, b) => b.mtime - a.mtime);
  for (const { entry } of builds.slice(KEEP_BUILDS)) {
    if (entry !== print) rmSync(join(DIST, entry), { recursive: true, force: true });
  }
  return join(target, 'main.js');
}

/** The bundle's entry for the current sources, building it first when they changed. */
export async function ensureBuilt() {
  const print = fingerprint();
  const main = join(DIST, print, 'main.js');
  if (existsSync(main)) return main;
  process.stderr.write('keel: sources changed, building dist/ ...\n');
  return build(print);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const main = await build();
  process.stdout.write(`built ${relative(ROOT, main)}\n`);
}
