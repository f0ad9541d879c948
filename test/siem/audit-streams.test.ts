/**
 * Audit streaming to a SIEM (docs/decisions.md "Audit streaming"; docs/deploy.md "Audit and SIEM"):
 * a partner's stream sends every entry of its scope (its own and its organisations', never another
 * partner's) to a real rsyslog over TLS, in order, and keeps doing so across an rsyslog restart and a
 * Keel restart (a second app on the same database) without loss; the lag shows in the read and in
 * /metrics; an https stream posts batches signed like webhook deliveries. Only the partner's whole-
 * partner administrators with the permissions reach a stream; the secret never comes back.
 */
import { createHmac } from 'node:crypto';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { rsyslogAvailable, startRsyslog, type Rsyslog } from '../helpers/rsyslog.js';
import { waitUntil } from '../helpers/wait.js';
import { raceTest, together } from '../helpers/race.js';
import { sample } from '../ops/prometheus.js';
import { clock } from '../../src/platform/clock.js';
import { createLogger } from '../../src/platform/logger.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { writeAudit } from '../../src/modules/audit/service.js';
import { claimStreams } from '../../src/modules/siem/sender.js';
import { rawQuery } from '../../src/platform/db/raw.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';

const METRICS_TOKEN = 'scrape-token-0123456789abcdef';

describe.skipIf(!backendAvailable() || !rsyslogAvailable())(`audit streams (${backend})`, () => {
  let app: TestApp;
  let second: RunningServer | null = null;
  let rsyslog: Rsyslog;
  let t: Tenant;
  let other: Tenant;
  let adminToken: string;
  let otherAdminToken: string;
  let platformToken: string;
  let streamId: string;
  let counter = 0;

  /** Where API calls go: the first app, or the second once the first has stopped. */
  const base = () => (second ? second.url : app.url);
  const api = async (method: string, path: string, token: string, body?: unknown) => {
    const res = await fetch(`${base()}/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'x-forwarded-for': app.ip, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null, text };
  };
  const db = () => (second ? second.keel.db : app.server.keel.db);
  /** Writes one entry of the given scope straight through the audit service; answers its marker. */
  const entry = async (scope: { orgId?: string | null; partnerId?: string | null }): Promise<string> => {
    const n = `e${++counter}`;
    await writeAudit(db(), { actor: { type: 'system' } }, { action: 'test.stream', orgId: scope.orgId ?? null, partnerId: scope.partnerId ?? null, details: { n } });
    return n;
  };
  /** The markers rsyslog received, in the order it wrote them. */
  const received = (): string[] =>
    rsyslog.lines().map((l) => {
      const json = JSON.parse(l.slice(l.indexOf('{'))) as { details: { n?: string } | null; action: string };
      return json.details?.n ?? json.action;
    });
  const arrived = (markers: string[]) => waitUntil(`rsyslog to receive ${markers.join(',')}`, received, (got) => markers.every((m) => got.includes(m)), { timeoutMs: 60_000, everyMs: 100 });

  beforeAll(async () => {
    rsyslog = await startRsyslog();
    app = await startTestApp({ env: { METRICS_ENABLED: 'true', METRICS_TOKEN } });
    t = await createTenant(app);
    other = await createTenant(app);
    // Partner administrators must have a second factor (Force MFA).
    adminToken = (await enrollTotp(app, (await login(app, t.partnerAdmin)).accessToken)).accessToken;
    otherAdminToken = (await enrollTotp(app, (await login(app, other.partnerAdmin)).accessToken)).accessToken;
    platformToken = (await login(app, await createUser(app, { platformAdmin: true }))).accessToken;
  });

  afterAll(async () => {
    clock.reset();
    if (second) {
      await second.close();
      await app.server.keel.database.close();
    } else await app?.close();
    await rsyslog?.close();
  });

  it('creates a syslog stream; reads carry status, lag and last error, never a secret; bad input is a 400', async () => {
    const bad = await api('POST', `/partners/${t.partnerId}/audit-streams`, adminToken, { type: 'syslog', url: 'https://siem.example.com' });
    expect([bad.status, bad.body.code]).toEqual([400, 'invalid_stream_url']);
    const withSecret = await api('POST', `/partners/${t.partnerId}/audit-streams`, adminToken, { type: 'syslog', url: `syslog+tls://127.0.0.1:${rsyslog.port}`, secret: 'x'.repeat(20) });
    expect([withSecret.status, withSecret.body.code]).toEqual([400, 'stream_secret_invalid']);
    const badCa = await api('POST', `/partners/${t.partnerId}/audit-streams`, adminToken, { type: 'syslog', url: `syslog+tls://127.0.0.1:${rsyslog.port}`, tls: { ca: 'not a certificate' } });
    expect([badCa.status, badCa.body.code]).toEqual([400, 'invalid_stream_tls']);

    const created = await api('POST', `/partners/${t.partnerId}/audit-streams`, adminToken, { type: 'syslog', url: `syslog+tls://127.0.0.1:${rsyslog.port}`, tls: { ca: rsyslog.caPem } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ partnerId: t.partnerId, type: 'syslog', hasSecret: false, tls: { ca: rsyslog.caPem }, lastError: null });
    expect(typeof created.body.lagSeconds).toBe('number');
    streamId = created.body.id;
  });

  it('sends every entry of the partner and its organisations, in order, and none of another partner', async () => {
    const mine: string[] = [];
    const theirs: string[] = [];
    for (let i = 0; i < 5; i++) {
      mine.push(await entry({ orgId: t.orgId, partnerId: t.partnerId }));
      mine.push(await entry({ partnerId: t.partnerId }));
      mine.push(await entry({ orgId: t.otherOrgId, partnerId: t.partnerId }));
      theirs.push(await entry({ orgId: other.orgId, partnerId: other.partnerId }));
      theirs.push(await entry({ partnerId: other.partnerId }));
    }
    theirs.push(await entry({}));
    await arrived(mine);
    const got = received().filter((m) => m.startsWith('e'));
    expect(got).toEqual(mine);
    expect(theirs.filter((m) => got.includes(m))).toEqual([]);
    // Each line is an RFC 5424 message with Keel's structured data and the entry as its MSG.
    const line = rsyslog.lines().find((l) => l.includes(`"n":"${mine[0]}"`)) ?? '';
    expect(line).toMatch(/^<110>1 \S+ \S+ keel - audit \[keel@32473 id="[0-9a-f-]{36}" seq="\d+" action="test\.stream" orgId="[0-9a-f-]{36}" partnerId="[0-9a-f-]{36}" hash="[0-9a-f]{64}"\] /);
    const read = await waitUntil('the stream to be caught up', () => api('GET', `/partners/${t.partnerId}/audit-streams/${streamId}`, adminToken), (r) => r.body.lagSeconds === 0 && r.body.status === 'ok');
    expect(read.body).toMatchObject({ status: 'ok', lagSeconds: 0, lastError: null });
  });

  it('an rsyslog outage: the lag and the error show in the read and in /metrics; entries written meanwhile arrive once it is back', async () => {
    await rsyslog.stop();
    const during = [await entry({ orgId: t.orgId, partnerId: t.partnerId }), await entry({ partnerId: t.partnerId })];
    const failing = await waitUntil('the stream to fail', () => api('GET', `/partners/${t.partnerId}/audit-streams/${streamId}`, adminToken), (r) => r.body.status === 'failing');
    expect(failing.body.lastError).toMatch(/network|ECONNREFUSED|closed/);
    clock.advance(120_000);
    const lagging = await api('GET', `/partners/${t.partnerId}/audit-streams/${streamId}`, adminToken);
    expect(lagging.body.lagSeconds).toBeGreaterThanOrEqual(120);
    const metrics = await fetch(`${app.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } }).then((r) => r.text());
    expect(sample(metrics, 'keel_audit_stream_lag_seconds', { stream: streamId })).toBeGreaterThanOrEqual(120);
    expect(metrics).not.toContain(t.partnerId);
    expect(received().filter((m) => during.includes(m))).toEqual([]);

    await rsyslog.restart();
    // The backoff waits on Keel's clock: moved past its longest wait.
    clock.advance(120_000);
    await arrived(during);
    const got = received().filter((m) => m.startsWith('e'));
    expect(got.slice(-2)).toEqual(during);
    await waitUntil('the stream to be caught up again', () => api('GET', `/partners/${t.partnerId}/audit-streams/${streamId}`, adminToken), (r) => r.body.lagSeconds === 0 && r.body.status === 'ok');
  });

  it('an https stream posts batches signed like webhook deliveries, to a receiver under a private CA', async () => {
    const secret = 'stream-secret-0123456789';
    const batches: { entries: { details: { n?: string } | null }[] }[] = [];
    const bad: string[] = [];
    const server: Server = createServer({ cert: rsyslog.server.cert, key: rsyslog.server.key }, (req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const ts = String(req.headers['x-service-signature-timestamp'] ?? '');
        const want = `sha256=${createHmac('sha256', secret).update(`${ts}.${body}`).digest('hex')}`;
        if (req.headers['x-service-signature'] !== want) {
          bad.push(body);
          res.writeHead(401).end();
          return;
        }
        batches.push(JSON.parse(body));
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    try {
      const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/ingest`;
      const noSecret = await api('POST', `/partners/${t.partnerId}/audit-streams`, adminToken, { type: 'https', url });
      expect([noSecret.status, noSecret.body.code]).toEqual([400, 'stream_secret_invalid']);
      const created = await api('POST', `/partners/${t.partnerId}/audit-streams`, adminToken, { type: 'https', url, secret, tls: { ca: rsyslog.caPem } });
      expect(created.status).toBe(201);
      expect(created.body.hasSecret).toBe(true);
      expect(created.text).not.toContain(secret);
      const n = await entry({ orgId: t.orgId, partnerId: t.partnerId });
      await waitUntil('the https receiver to get the entry', () => batches.flatMap((b) => b.entries.map((e) => e.details?.n)), (got) => got.includes(n), { timeoutMs: 60_000 });
      expect(bad).toEqual([]);
      const list = await api('GET', `/partners/${t.partnerId}/audit-streams`, adminToken);
      expect(list.body.data.map((s: { id: string }) => s.id)).toEqual(expect.arrayContaining([streamId, created.body.id]));
      expect(list.text).not.toContain(secret);
      const patched = await api('PATCH', `/partners/${t.partnerId}/audit-streams/${created.body.id}`, adminToken, { secret: 'another-secret-0123456789' });
      expect(patched.status).toBe(200);
      expect(patched.text).not.toContain('another-secret');
      const [row] = await rawQuery<{ secret_sealed: string }>(db(), 'select secret_sealed from audit_streams where id = $1', [created.body.id]);
      expect(row?.secret_sealed).not.toContain('another-secret');
      const scrape = () => fetch(`${base()}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } }).then((r) => r.text());
      expect(await scrape()).toContain(`stream="${created.body.id}"`);
      expect((await api('DELETE', `/partners/${t.partnerId}/audit-streams/${created.body.id}`, adminToken)).status).toBe(204);
      // A deleted stream's series goes with it.
      expect(await scrape()).not.toContain(created.body.id);
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });

  it("another partner's administrator, an organisation user and a key without the permission cannot reach the stream", async () => {
    for (const [method, body] of [['GET', undefined], ['PATCH', { url: `syslog+tls://127.0.0.1:${rsyslog.port}` }], ['DELETE', undefined]] as const) {
      const res = await api(method, `/partners/${t.partnerId}/audit-streams/${streamId}`, otherAdminToken, body);
      expect({ method, status: res.status }).toEqual({ method, status: 404 });
      const own = await api(method, `/partners/${other.partnerId}/audit-streams/${streamId}`, otherAdminToken, body);
      expect({ method, status: own.status }).toEqual({ method, status: 404 });
    }
    expect((await api('GET', `/partners/${other.partnerId}/audit-streams`, otherAdminToken)).body.data).toEqual([]);
    const orgAdmin = (await login(app, t.orgAdmin)).accessToken;
    expect((await api('GET', `/partners/${t.partnerId}/audit-streams`, orgAdmin)).status).toBe(403);
    expect((await api('GET', '/audit-streams', adminToken)).status).toBe(403);
    // A partner user without the whole partner.
    const narrow = await createUser(app, { partner: { partnerId: t.partnerId, roleId: SYSTEM_ROLES.partnerReadOnly.id, orgAccess: 'selected', orgIds: [t.orgId] } });
    const narrowRes = await api('GET', `/partners/${t.partnerId}/audit-streams`, (await login(app, narrow)).accessToken);
    expect([narrowRes.status, narrowRes.body.code]).toEqual([403, 'full_org_access_required']);

    const readKey = await api('POST', '/api-keys', adminToken, { name: 'audit reader', permissions: [{ resource: 'audit', action: 'read' }] });
    expect(readKey.status).toBe(201);
    const key = readKey.body.key as string;
    expect((await api('GET', `/partners/${t.partnerId}/audit-streams`, key)).status).toBe(200);
    const refused = await api('POST', `/partners/${t.partnerId}/audit-streams`, key, { type: 'syslog', url: `syslog+tls://127.0.0.1:${rsyslog.port}` });
    expect([refused.status, refused.body.code]).toEqual([403, 'permission_denied']);
    const refusedPatch = await api('PATCH', `/partners/${t.partnerId}/audit-streams/${streamId}`, key, { url: `syslog+tls://127.0.0.1:${rsyslog.port}` });
    expect(refusedPatch.status).toBe(403);
    expect((await api('GET', `/partners/${t.partnerId}/audit-streams/${streamId}`, adminToken)).status).toBe(200);
  });

  it("the platform's stream is for platform administrators", async () => {
    const created = await api('POST', '/audit-streams', platformToken, { type: 'https', url: 'https://127.0.0.1:1/never', secret: 'platform-secret-0123456789' });
    expect(created.status).toBe(201);
    expect(created.body.partnerId).toBeNull();
    expect((await api('GET', `/partners/${t.partnerId}/audit-streams/${created.body.id}`, adminToken)).status).toBe(404);
    expect((await api('DELETE', `/audit-streams/${created.body.id}`, platformToken)).status).toBe(204);
  });

  raceTest('one sender at a time: of eight processes claiming a due stream at once, one holds it', async () => {
    const created = await api('POST', '/audit-streams', platformToken, { type: 'https', url: 'https://127.0.0.1:1/race', secret: 'platform-secret-0123456789' });
    expect(created.status).toBe(201);
    // Kept away from the running sender (due only in an hour), then claimed by eight claimers at once.
    const later = clock.nowMs() + 3600_000;
    await rawQuery(db(), 'update audit_streams set next_attempt_at = $2::timestamptz where id = $1', [created.body.id, new Date(later).toISOString()]);
    const claims = await together(8, () => claimStreams(db(), 10, later + 1000));
    expect(claims.map((c) => c.filter((s) => s.id === created.body.id).length).reduce((a, b) => a + b, 0)).toBe(1);
    // The claimers took the other streams too (due an hour from now): they let them go.
    await rawQuery(db(), 'update audit_streams set claim_id = null, lease_expires_at = null where claim_id = any($1::uuid[])', [claims.flat().map((c) => c.claimId)]);
    expect((await api('DELETE', `/audit-streams/${created.body.id}`, platformToken)).status).toBe(204);
  });

  it('a Keel restart resumes from the cursor: entries written while Keel was down arrive, once each', async () => {
    const before = received().filter((m) => m.startsWith('e'));
    const config = app.server.keel.config;
    const database = app.server.keel.database;
    await app.server.close();
    const down = [await entry({ orgId: t.orgId, partnerId: t.partnerId }), await entry({ partnerId: t.partnerId }), await entry({ orgId: t.otherOrgId, partnerId: t.partnerId })];
    second = await startServer({ config, log: createLogger('silent'), database, skipMigrate: true, port: 0, host: '127.0.0.1' });
    await arrived(down);
    const after = received().filter((m) => m.startsWith('e'));
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.slice(before.length)).toEqual(down);
  });
});
