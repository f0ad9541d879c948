/**
 * The fleet picture on PostgreSQL: `GET /agent-versions/distribution` over DISTRIBUTION_DEVICES (default
 * 100,000) devices inserted directly with SQL (one statement, varied: versions, platforms, auto-update
 * off, offline, site and group placement, some device pins and blocked versions), then timed over
 * HTTP: one organisation (`orgId`), its partner (`partnerId`) and the whole fleet. Goal printed: the
 * median under 100 ms for the organisation.
 *
 *   npm run bench -- distribution          (PostgreSQL only: the embedded database cannot be written beside a running Keel)
 *   tsx bench/distribution.ts
 */
import { randomBytes } from 'node:crypto';
import { generate } from 'otplib';
import { benchEnv, fmt, isMain, median, postJson, printTable, startKeel, startPostgres } from './lib.js';

export const DISTRIBUTION_GOAL_MS = 100;
const DEVICES = Number(process.env.DISTRIBUTION_DEVICES ?? '100000');
const RUNS = Number(process.env.DISTRIBUTION_RUNS ?? '20');

export interface DistributionResult {
  devices: number;
  insertSeconds: number;
  rows: { scope: string; median: number; p95: number; counted: number }[];
}

async function get(url: string, token: string): Promise<{ status: number; body: any; ms: number }> {
  const t = performance.now();
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
  const body = await res.json();
  return { status: res.status, body, ms: performance.now() - t };
}

export async function benchDistribution(): Promise<DistributionResult | null> {
  const server = await startPostgres();
  if (!server) {
    process.stderr.write('PostgreSQL binaries not found (/usr/lib/postgresql/*/bin): the distribution benchmark needs them\n');
    return null;
  }
  const db = await server.createDatabase();
  const admin = { email: `admin-${randomBytes(4).toString('hex')}@example.com`, password: 'correct-horse-battery-admin-staple' };
  const keel = await startKeel(benchEnv({ DATABASE_URL: db.url, ...(server.redisUrl ? { REDIS_URL: server.redisUrl } : {}), ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password }));
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    const first = await postJson(`${keel.url}/api/v1/auth/login`, admin);
    const auth0 = { authorization: `Bearer ${first.body.accessToken as string}` };
    const setup = await postJson(`${keel.url}/api/v1/auth/mfa/setup`, {}, auth0);
    const enabled = await postJson(`${keel.url}/api/v1/auth/mfa/enable`, { code: await generate({ secret: setup.body.secret as string }) }, auth0);
    const token = enabled.body.accessToken as string;
    const auth = { authorization: `Bearer ${token}` };
    const api = async (path: string, body: unknown) => {
      const res = await postJson(`${keel.url}/api/v1${path}`, body, auth);
      if (res.status !== 201 && res.status !== 200) throw new Error(`POST ${path}: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body;
    };
    for (const version of ['1.0.0', '2.0.0']) {
      await api('/agent-versions', { version, component: 'agent', os: 'linux', arch: 'amd64', url: `https://releases.example.com/${version}/agent`, sha256: 'a'.repeat(64), size: 1000 });
    }
    await api('/agent-versions/promote', { version: '2.0.0' });
    const partner = await api('/partners', { name: 'Bench MSP' });
    const org = await api('/orgs', { name: 'Bench', partnerId: partner.id });
    const sites = [await api(`/orgs/${org.id}/sites`, { name: 'HQ' }), await api(`/orgs/${org.id}/sites`, { name: 'Branch' })];
    const group = await api(`/orgs/${org.id}/device-groups`, { name: 'Finance-PCs', siteId: sites[0].id });
    const pinned = await fetch(`${keel.url}/api/v1/device-groups/${group.id as string}/agent-update-settings`, {
      method: 'PUT', headers: { 'content-type': 'application/json', ...auth }, body: JSON.stringify({ pinnedVersions: { agent: '1.0.0' } }),
    });
    if (pinned.status !== 200) throw new Error(`pin: ${pinned.status}`);

    process.stderr.write(`[distribution] inserting ${DEVICES} devices with SQL...\n`);
    const started = Date.now();
    // Every 10th device in the pinned group, every 7th offline, every 13th auto-update off, every 17th on arm64 (no build),
    // 30% still on 1.0.0, the rest up to date.
    await client.query(
      `insert into devices (id, org_id, site_id, device_group_id, hostname, os, arch, status, last_seen_at, token_hash, components, auto_update)
       select gen_random_uuid(), $1::uuid, case when g % 2 = 0 then $2::uuid else $3::uuid end, case when g % 10 = 0 then $4::uuid end, 'bench-' || g, 'linux',
         case when g % 17 = 0 then 'arm64' else 'amd64' end, 'online', case when g % 7 = 0 then now() - interval '1 hour' else now() end,
         md5('bench' || g) || md5('device' || g), jsonb_build_object('agent', case when g % 10 < 3 then '1.0.0' else '2.0.0' end), g % 13 <> 0
       from generate_series(1, $5::int) g`,
      [org.id, sites[0].id, sites[1].id, group.id, DEVICES],
    );
    // Some devices with a pin of their own, some with a version they rolled back.
    await client.query(
      `insert into agent_update_settings (id, owner_type, owner_id, pinned_versions)
       select gen_random_uuid(), 'device', id, '{"agent": "1.0.0"}'::jsonb from devices where hostname like 'bench-%' and hostname::text ~ '00$' limit 500`,
    );
    await client.query(
      `insert into agent_offers (id, device_id, component, version, os, arch, outcome, reported_at, blocked)
       select gen_random_uuid(), id, 'agent', '2.0.0', os, arch, 'rolled_back', now(), true from devices where components->>'agent' = '1.0.0' and hostname ~ '1$' limit 500`,
    );
    await client.query('analyze devices; analyze agent_offers; analyze agent_update_settings');
    const insertSeconds = (Date.now() - started) / 1000;

    const base = `${keel.url}/api/v1/agent-versions/distribution`;
    const rows: DistributionResult['rows'] = [];
    for (const [scope, url] of [[`organisation`, `${base}?orgId=${org.id as string}`], ['partner', `${base}?partnerId=${partner.id as string}`], ['fleet', base]] as const) {
      for (let i = 0; i < 3; i++) await get(url, token); // warm-up
      const times: number[] = [];
      let counted = 0;
      for (let i = 0; i < RUNS; i++) {
        const r = await get(url, token);
        if (r.status !== 200) throw new Error(`${scope}: ${r.status} ${JSON.stringify(r.body)}`);
        counted = (r.body.versions as { devices: number }[]).reduce((n, v) => n + v.devices, 0);
        times.push(r.ms);
      }
      const sorted = [...times].sort((a, b) => a - b);
      rows.push({ scope, median: median(times), p95: sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.95) - 1)] ?? 0, counted });
    }
    return { devices: DEVICES, insertSeconds, rows };
  } finally {
    await client.end().catch(() => undefined);
    await keel.stop();
    await db.drop();
    await server.stop();
  }
}

export function printDistribution(r: DistributionResult): void {
  printTable(
    `Agent version distribution over ${fmt(r.devices)} devices (PostgreSQL; inserted in ${fmt(r.insertSeconds, 1)} s; goal: organisation median < ${DISTRIBUTION_GOAL_MS} ms)`,
    ['scope', 'devices counted', 'median ms', 'p95 ms', 'goal'],
    r.rows.map((x) => [x.scope, fmt(x.counted), fmt(x.median, 1), fmt(x.p95, 1), x.scope === 'organisation' ? (x.median < DISTRIBUTION_GOAL_MS ? 'met' : 'NOT met') : '']),
  );
}

if (isMain(import.meta.url)) {
  const r = await benchDistribution();
  if (r) printDistribution(r);
}
