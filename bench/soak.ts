/**
 * Soak: Keel's production shape under steady use while its processes are killed and restarted.
 *
 * Two `keel serve` (WORKER=off) and one `keel worker` on one PostgreSQL and one Redis (started from
 * the Debian binaries, as the tests start them), at their default settings. For SOAK_MINUTES
 * (default 15) a steady load runs against both API processes:
 *
 * - sign-ins and authenticated reads;
 * - revocations across processes: a fresh account signs in on one process, its token is used on the
 *   other (so that process caches the session), it logs out on the first, and the second is asked
 *   until it refuses the token; an answer 200 later than CACHE_MAX_STALENESS_SECONDS after the
 *   logout is a revocation not honoured;
 * - heartbeats of enrolled devices;
 * - `POST /events` routed to a webhook on a local receiver, each event with its own id.
 *
 * Every SOAK_FAULT_SECONDS (default 60) one process, chosen at random, is killed (SIGKILL or SIGTERM,
 * at random) and started again; a fault window runs from the kill to SOAK_SETTLE_SECONDS after the
 * restarted process is ready. At the end it waits for the deliveries to arrive and prints: events
 * accepted and delivered (lost = accepted but never delivered), duplicates, revocations not honoured
 * after the cache bound, 5xx answers outside and inside fault windows, and recovery times.
 *
 *   npm run soak                    (SOAK_MINUTES=15)
 *   SOAK_MINUTES=2 SOAK_FAULT_SECONDS=30 npm run soak
 *
 * Every request goes to 127.0.0.1; the loops are bounded in time and stop by themselves.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { freePort, sleep, spawnGroup, startPostgres, tempDir, waitForHealthy, type Proc } from './lib.js';

const MINUTES = Number(process.env.SOAK_MINUTES ?? '15');
const FAULT_SECONDS = Number(process.env.SOAK_FAULT_SECONDS ?? '60');
const SETTLE_SECONDS = Number(process.env.SOAK_SETTLE_SECONDS ?? '10');
const STALENESS_SECONDS = 30; // Keel's default CACHE_MAX_STALENESS_SECONDS
const DEVICES = 50;
const ADMIN = { email: 'soak-admin@example.com', password: 'harbour-velvet-compass-93-lilac' };

interface Role {
  name: string;
  kind: 'serve' | 'worker';
  port: number;
  proc: Proc | null;
}

const now = () => Date.now();
const faultWindows: { from: number; to: number }[] = [];
const inFault = (t: number) => faultWindows.some((w) => t >= w.from && t <= w.to + SETTLE_SECONDS * 1000);
const counts = { requests: 0, connectionErrors: 0, fiveXxOutside: 0, fiveXxInside: 0, logins: 0, reads: 0, heartbeats: 0, revocations: 0, revokedAcceptedAfterBound: 0, eventsAccepted: 0 };
const fiveXxSamples: string[] = [];
const recoveries: { name: string; signal: string; ms: number }[] = [];

async function call(base: string, method: string, path: string, opts: { token?: string; body?: unknown } = {}): Promise<{ status: number; body: any } | null> {
  counts.requests++;
  const started = now();
  try {
    const res = await fetch(`${base}/api/v1${path}`, {
      method,
      headers: { ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}), ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    if (res.status >= 500) {
      if (inFault(started) || inFault(now())) counts.fiveXxInside++;
      else {
        counts.fiveXxOutside++;
        if (fiveXxSamples.length < 10) fiveXxSamples.push(`${method} ${path} ${res.status} ${text.slice(0, 200)}`);
      }
    }
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // not JSON
    }
    return { status: res.status, body };
  } catch {
    counts.connectionErrors++;
    return null; // a process that is down: the client moves on
  }
}

async function main(): Promise<void> {
  const postgres = await startPostgres();
  if (!postgres?.redisUrl) throw new Error('soak needs the Debian postgresql and redis-server packages');
  const db = await postgres.createDatabase();

  // The receiver: every delivery by its event's own id.
  const received = new Map<string, number>();
  const rx = createServer((req: IncomingMessage, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString('utf8')));
    req.on('end', () => {
      try {
        const id = (JSON.parse(raw) as { data?: { soakId?: string } }).data?.soakId;
        if (id) received.set(id, (received.get(id) ?? 0) + 1);
      } catch {
        // not ours
      }
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => rx.listen(0, '127.0.0.1', resolve));
  const rxUrl = `http://127.0.0.1:${(rx.address() as AddressInfo).port}/hook`;

  const dataDir = tempDir('keel-soak-');
  const env = {
    NODE_ENV: 'development',
    HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    DATABASE_URL: db.url,
    REDIS_URL: postgres.redisUrl,
    WORKER: 'off',
    APP_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    JWT_SECRET: randomBytes(48).toString('base64url'),
    ADMIN_EMAIL: ADMIN.email,
    ADMIN_PASSWORD: ADMIN.password,
    ENABLE_REGISTRATION: 'true',
    ALLOW_INSECURE_TARGETS: 'true',
    // The load comes from one address: per-IP limits would measure the limiter, not the processes.
    LOGIN_LIMIT: '100000',
    LOGIN_IP_LIMIT: '100000',
    REGISTER_LIMIT: '100000',
  };
  const roles: Role[] = [
    { name: 'api-1', kind: 'serve', port: await freePort(), proc: null },
    { name: 'api-2', kind: 'serve', port: await freePort(), proc: null },
    { name: 'worker', kind: 'worker', port: 0, proc: null },
  ];
  const start = async (r: Role): Promise<void> => {
    const proc = spawnGroup(process.execPath, ['bin/keel.js', r.kind], { ...env, PORT: String(r.port) });
    r.proc = proc;
    if (r.kind === 'serve') await waitForHealthy(`http://127.0.0.1:${r.port}/health/ready`, proc, 120_000, 50);
    else {
      const deadline = now() + 120_000;
      while (!proc.output().includes('Keel worker is delivering webhooks')) {
        if (proc.exited() || now() > deadline) throw new Error(`worker did not start:\n${proc.output()}`);
        await sleep(50);
      }
    }
  };
  await start(roles[0]!);
  await Promise.all([start(roles[1]!), start(roles[2]!)]);
  const apis = roles.filter((r) => r.kind === 'serve').map((r) => `http://127.0.0.1:${r.port}`);
  const anyApi = () => apis[Math.floor(Math.random() * apis.length)]!;
  const otherApi = (base: string) => apis.find((a) => a !== base)!;

  // Arrange: an organisation, a webhook to the receiver, a key that publishes, enrolled devices.
  const admin = (await call(apis[0]!, 'POST', '/auth/login', { body: ADMIN }))!.body.accessToken as string;
  const partnerId = (await call(apis[0]!, 'POST', '/partners', { token: admin, body: { name: 'Soak Partner' } }))!.body.id as string;
  const org = (await call(apis[0]!, 'POST', '/orgs', { token: admin, body: { name: 'Soak Ltd', partnerId } }))!.body.id as string;
  const hook = await call(apis[0]!, 'POST', '/webhooks', { token: admin, body: { orgId: org, name: 'soak', url: rxUrl, events: ['alert.triggered'] } });
  if (hook?.status !== 201) throw new Error(`webhook: ${JSON.stringify(hook)}`);
  const key = (await call(apis[0]!, 'POST', '/api-keys', { token: admin, body: { name: 'soak', permissions: [{ resource: 'events', action: 'publish' }] } }))!.body.key as string;
  const enrolment = await call(apis[0]!, 'POST', `/orgs/${org}/enrollment-keys`, { token: admin, body: {} });
  if (enrolment?.status !== 201) throw new Error(`enrolment key: ${JSON.stringify(enrolment)}`);
  const devices: string[] = [];
  for (let i = 0; i < DEVICES; i++) {
    const d = await call(apis[i % 2]!, 'POST', '/agents/enroll', { body: { enrollmentKey: enrolment.body.key, hostname: `soak-${i}`, os: 'linux', arch: 'amd64', agentVersion: '1.0.0' } });
    if (d?.status !== 201) throw new Error(`enrol: ${JSON.stringify(d)}`);
    devices.push(d.body.deviceToken as string);
  }

  const endAt = now() + MINUTES * 60_000;
  const accepted = new Set<string>();
  const loops: Promise<void>[] = [];
  const loop = (fn: () => Promise<void>, pauseMs: number) =>
    loops.push(
      (async () => {
        while (now() < endAt) {
          await fn();
          await sleep(pauseMs);
        }
      })(),
    );

  // Sign-ins and reads.
  loop(async () => {
    const base = anyApi();
    const s = await call(base, 'POST', '/auth/login', { body: ADMIN });
    if (s?.status === 200) {
      counts.logins++;
      for (let i = 0; i < 5; i++) if ((await call(anyApi(), 'GET', '/users/me', { token: s.body.accessToken }))?.status === 200) counts.reads++;
    }
  }, 200);
  // Revocations across processes.
  loop(async () => {
    const a = anyApi();
    const b = otherApi(a);
    const reg = await call(a, 'POST', '/auth/register', { body: { email: `soak-${randomUUID()}@example.com`, password: ADMIN.password, name: 'Soak' } });
    if (reg?.status !== 201) return;
    const token = reg.body.accessToken as string;
    if ((await call(b, 'GET', '/users/me', { token }))?.status !== 200) return;
    const out = await call(a, 'POST', '/auth/logout', { token });
    if (!out || out.status >= 300) return;
    counts.revocations++;
    const loggedOut = now();
    for (;;) {
      const r = await call(b, 'GET', '/users/me', { token });
      if (r?.status === 401) return;
      if (r?.status === 200 && now() - loggedOut > STALENESS_SECONDS * 1000) {
        counts.revokedAcceptedAfterBound++;
        return;
      }
      if (now() - loggedOut > (STALENESS_SECONDS + 30) * 1000) return;
      await sleep(100);
    }
  }, 500);
  // Heartbeats.
  loop(async () => {
    await Promise.all(
      devices.map(async (token) => {
        if ((await call(anyApi(), 'POST', '/agents/heartbeat', { token, body: { components: { agent: '1.0.0' } } }))?.status === 200) counts.heartbeats++;
      }),
    );
  }, 5_000);
  // Events: each accepted one must be delivered.
  loop(async () => {
    const soakId = randomUUID();
    const r = await call(anyApi(), 'POST', '/events', { token: key, body: { orgId: org, type: 'alert.triggered', data: { soakId } } });
    if (r?.status === 202) {
      accepted.add(soakId);
      counts.eventsAccepted++;
    }
  }, 100);

  // Faults: kill one process at random, start it again, measure its recovery.
  loops.push(
    (async () => {
      while (now() + FAULT_SECONDS * 1000 < endAt) {
        await sleep(FAULT_SECONDS * 1000);
        const victim = roles[Math.floor(Math.random() * roles.length)]!;
        const signal = Math.random() < 0.5 ? 'SIGKILL' : 'SIGTERM';
        const window = { from: now(), to: Number.POSITIVE_INFINITY };
        faultWindows.push(window);
        const pid = victim.proc?.child.pid;
        if (pid !== undefined) {
          try {
            process.kill(-pid, signal);
          } catch {
            // gone already
          }
        }
        const deadline = now() + 30_000;
        while (victim.proc && !victim.proc.exited() && now() < deadline) await sleep(20);
        if (victim.proc && !victim.proc.exited()) await victim.proc.stop(0);
        await start(victim);
        window.to = now();
        recoveries.push({ name: victim.name, signal, ms: window.to - window.from });
        console.log(`${new Date().toISOString()} ${signal} ${victim.name}: back in ${window.to - window.from} ms`);
      }
    })(),
  );

  await Promise.all(loops);
  // Let the deliveries of the last events arrive.
  const drainDeadline = now() + 120_000;
  while ([...accepted].some((id) => !received.has(id)) && now() < drainDeadline) await sleep(500);
  const lost = [...accepted].filter((id) => !received.has(id)).length;
  const duplicates = [...received.values()].filter((n) => n > 1).length;
  const recoveryMs = recoveries.map((r) => r.ms).sort((a, b) => a - b);

  console.log(`\nSoak: ${MINUTES} min, 2 serve (WORKER=off) + 1 worker on PostgreSQL + Redis, a fault every ${FAULT_SECONDS} s`);
  console.log(
    JSON.stringify(
      {
        requests: counts.requests,
        logins: counts.logins,
        reads: counts.reads,
        heartbeats: counts.heartbeats,
        connectionErrors: counts.connectionErrors,
        eventsAccepted: counts.eventsAccepted,
        eventsDelivered: [...accepted].filter((id) => received.has(id)).length,
        lostDeliveries: lost,
        duplicateDeliveries: duplicates,
        revocations: counts.revocations,
        revokedTokensAcceptedAfterBound: counts.revokedAcceptedAfterBound,
        fiveXxOutsideFaultWindows: counts.fiveXxOutside,
        fiveXxInsideFaultWindows: counts.fiveXxInside,
        faults: recoveries.map((r) => `${r.signal} ${r.name} ${r.ms} ms`),
        recoveryMs: recoveryMs.length ? { min: recoveryMs[0], median: recoveryMs[Math.floor(recoveryMs.length / 2)], max: recoveryMs.at(-1) } : null,
        fiveXxSamples,
      },
      null,
      2,
    ),
  );

  for (const r of roles) await r.proc?.stop();
  rx.close();
  await db.drop();
  await postgres.stop();
  process.exit(lost === 0 && counts.revokedAcceptedAfterBound === 0 && counts.fiveXxOutside === 0 ? 0 : 1);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(2);
});
