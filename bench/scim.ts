/**
 * A directory's initial SCIM import over real HTTP against Keel (docs/decisions.md "SCIM"):
 *
 * 1. SCIM_USERS (default 10,000) `POST /scim/v2/Users` at SCIM_CONCURRENCY (default 8: Entra ID sends
 *    5-10 requests in parallel), then SCIM_GROUPS (default 200) `POST /scim/v2/Groups` of
 *    SCIM_GROUP_SIZE (default 50) members each. Goal printed: the whole import under 60 s.
 * 2. `GET /scim/v2/Users?filter=userName eq "…"` for SCIM_LOOKUPS (default 1,000) random users of the
 *    10,000, one at a time; p50/p99 latency. Goal printed: p99 under 10 ms (an index, not a scan).
 *
 *   npm run bench -- scim           (both backends; or: tsx bench/scim.ts [pglite|postgres])
 */
import { loadavg } from 'node:os';
import { randomBytes } from 'node:crypto';
import { generate } from 'otplib';
import { cpuMeter } from './cpu.js';
import { fmt, isMain, pool, postJson, printTable, withBackends, type BenchBackend } from './lib.js';

export const SCIM_IMPORT_GOAL_S = 60;
export const SCIM_LOOKUP_P99_GOAL_MS = 10;
const USERS = Number(process.env.SCIM_USERS ?? '10000');
const GROUPS = Number(process.env.SCIM_GROUPS ?? '200');
const GROUP_SIZE = Number(process.env.SCIM_GROUP_SIZE ?? '50');
const CONCURRENCY = Number(process.env.SCIM_CONCURRENCY ?? '8');
const LOOKUPS = Number(process.env.SCIM_LOOKUPS ?? '1000');

export interface ScimBenchResult {
  backend: string;
  users: number;
  groups: number;
  usersSeconds: number;
  groupsSeconds: number;
  importSeconds: number;
  lookupP50: number;
  lookupP99: number;
  /** Keel's CPU (all its threads) per `POST /Users`, and the database server's (PostgreSQL only). */
  cpuMsPerUser: number;
  dbCpuMsPerUser: number;
  load: string;
}

const loadNow = () => loadavg().map((l) => l.toFixed(2)).join(' ');
const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;

async function adminToken(url: string, admin: { email: string; password: string }): Promise<string> {
  const first = await postJson(`${url}/api/v1/auth/login`, admin);
  const auth = { authorization: `Bearer ${first.body.accessToken as string}` };
  const setup = await postJson(`${url}/api/v1/auth/mfa/setup`, {}, auth);
  const enabled = await postJson(`${url}/api/v1/auth/mfa/enable`, { code: await generate({ secret: setup.body.secret as string }) }, auth);
  if (enabled.status !== 200) throw new Error(`mfa enable: ${enabled.status} ${JSON.stringify(enabled.body)}`);
  return enabled.body.accessToken as string;
}

export async function benchScim(backend: BenchBackend): Promise<ScimBenchResult> {
  const admin = { email: `admin-${randomBytes(4).toString('hex')}@example.com`, password: 'correct-horse-battery-admin-staple' };
  // The import is the directory's burst: the per-token limit is not what is measured.
  const keel = await backend.startKeel({ ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password, SCIM_RATE_LIMIT: '1000000' });
  try {
    const auth = { authorization: `Bearer ${await adminToken(keel.url, admin)}` };
    const partner = await postJson(`${keel.url}/api/v1/partners`, { name: 'MSP' }, auth);
    if (partner.status !== 201) throw new Error(`partner: ${partner.status} ${JSON.stringify(partner.body)}`);
    const org = await postJson(`${keel.url}/api/v1/orgs`, { name: 'Directory', partnerId: partner.body.id as string }, auth);
    if (org.status !== 201) throw new Error(`org: ${org.status} ${JSON.stringify(org.body)}`);
    const made = await postJson(`${keel.url}/api/v1/orgs/${org.body.id as string}/scim-tokens`, { name: 'bench' }, auth);
    if (made.status !== 201) throw new Error(`token: ${made.status} ${JSON.stringify(made.body)}`);
    const scim = { authorization: `Bearer ${made.body.token as string}` };
    const base = `${keel.url}/scim/v2`;
    const tag = randomBytes(3).toString('hex');
    const names = Array.from({ length: USERS }, (_, i) => `person-${i}-${tag}@example.com`);

    process.stderr.write(`[scim/${backend.name}] POST ${USERS} users at concurrency ${CONCURRENCY}...\n`);
    const started = Date.now();
    const meter = cpuMeter(keel.proc.child.pid ?? null);
    const ids = await pool(names, CONCURRENCY, async (userName, i) => {
      const res = await postJson(`${base}/Users`, { schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userName, externalId: `ext-${i}`, name: { givenName: 'Person', familyName: String(i) }, active: true }, scim);
      if (res.status !== 201) throw new Error(`POST /Users: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body.id as string;
    });
    const usersSeconds = (Date.now() - started) / 1000;
    const cpu = meter.stop(USERS);
    process.stderr.write(`[scim/${backend.name}] POST ${GROUPS} groups of ${GROUP_SIZE}...\n`);
    const groupsStarted = Date.now();
    await pool(Array.from({ length: GROUPS }, (_, g) => g), CONCURRENCY, async (g) => {
      const members = Array.from({ length: GROUP_SIZE }, (_, k) => ({ value: ids[(g * GROUP_SIZE + k) % ids.length] }));
      const res = await postJson(`${base}/Groups`, { schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'], displayName: `Group ${g} ${tag}`, members }, scim);
      if (res.status !== 201) throw new Error(`POST /Groups: ${res.status} ${JSON.stringify(res.body)}`);
    });
    const groupsSeconds = (Date.now() - groupsStarted) / 1000;

    process.stderr.write(`[scim/${backend.name}] ${LOOKUPS} lookups by userName...\n`);
    const times: number[] = [];
    for (let i = 0; i < LOOKUPS + 50; i++) {
      const userName = names[Math.floor(Math.random() * names.length)] ?? '';
      const t0 = performance.now();
      const res = await fetch(`${base}/Users?filter=${encodeURIComponent(`userName eq "${userName}"`)}`, { headers: scim });
      const body = (await res.json()) as { totalResults?: number };
      const ms = performance.now() - t0;
      if (res.status !== 200 || body.totalResults !== 1) throw new Error(`lookup: ${res.status} ${JSON.stringify(body)}`);
      if (i >= 50) times.push(ms); // the first 50 warm up
    }
    times.sort((a, b) => a - b);
    return {
      backend: backend.name,
      users: USERS,
      groups: GROUPS,
      usersSeconds,
      groupsSeconds,
      importSeconds: usersSeconds + groupsSeconds,
      lookupP50: percentile(times, 50),
      lookupP99: percentile(times, 99),
      cpuMsPerUser: cpu.mainMs + cpu.threadsMs,
      dbCpuMsPerUser: cpu.serversMs,
      load: loadNow(),
    };
  } finally {
    await keel.stop();
  }
}

export const scimGoal = (r: ScimBenchResult): string => (r.importSeconds < SCIM_IMPORT_GOAL_S && r.lookupP99 < SCIM_LOOKUP_P99_GOAL_MS ? 'met' : 'NOT met');

export function printScim(results: ScimBenchResult[]): void {
  printTable(
    'SCIM import',
    ['backend', 'users (s)', 'groups (s)', 'import (s)', 'userName eq p50/p99 (ms)', 'CPU ms per POST (Keel / db)', 'load average', 'goal'],
    results.map((r) => [
      r.backend,
      `${r.users} in ${fmt(r.usersSeconds, 1)}`,
      `${r.groups}×${GROUP_SIZE} in ${fmt(r.groupsSeconds, 1)}`,
      fmt(r.importSeconds, 1),
      `${fmt(r.lookupP50, 2)}/${fmt(r.lookupP99, 2)}`,
      `${fmt(r.cpuMsPerUser, 2)} / ${fmt(r.dbCpuMsPerUser, 2)}`,
      r.load,
      `import < ${SCIM_IMPORT_GOAL_S} s, p99 < ${SCIM_LOOKUP_P99_GOAL_MS} ms: ${scimGoal(r)}`,
    ]),
  );
}

if (isMain(import.meta.url)) {
  const only = process.argv[2] as 'pglite' | 'postgres' | undefined;
  printScim(await withBackends(benchScim, only));
  process.exit(0);
}
