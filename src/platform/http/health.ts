import { createRoute, z } from '@hono/zod-openapi';
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Env } from 'hono';
import type { Database } from '../db/client.js';

const Health = z
  .object({
    status: z.enum(['ok', 'degraded']).openapi({ description: '`ok` when the database answered within 2 seconds; `degraded` (with status 503) when it did not' }),
    version: z.string().openapi({ description: 'The running service version (`SERVICE_VERSION`, else the package version)', example: '1.0.0' }),
    database: z
      .object({
        status: z.enum(['ok', 'unreachable']).openapi({ description: '`ok` when `select 1` answered within 2 seconds' }),
        kind: z.enum(['pglite', 'postgres']).openapi({ description: '`pglite` (embedded, in `DATA_DIR`) or `postgres` (`DATABASE_URL`)' }),
      })
      .openapi({ description: 'The database this process uses and whether it answered' }),
  })
  .openapi('Health');

const route = createRoute({
  method: 'get',
  path: '/health',
  tags: ['health'],
  summary: 'Liveness, version and database reachability',
  responses: {
    200: { description: 'Healthy', content: { 'application/json': { schema: Health } } },
    503: { description: 'Database unreachable', content: { 'application/json': { schema: Health } } },
  },
});

export function mountHealth<E extends Env>(app: OpenAPIHono<E>, version: string, database: Database): void {
  app.openapi(route, async (c) => {
    let ok = true;
    try {
      await Promise.race([
        database.query('select 1'),
        new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 2000).unref()),
      ]);
    } catch {
      ok = false;
    }
    const body = { status: ok ? 'ok' : 'degraded', version, database: { status: ok ? 'ok' : 'unreachable', kind: database.kind } } as const;
    return ok ? c.json(body, 200) : c.json(body, 503);
  });
}

/** How long a readiness check waits for each dependency before calling it down. */
export const READY_DEADLINE_MS = { database: 2000, redis: 1000 } as const;

const Check = z
  .object({
    status: z.enum(['up', 'down']).openapi({ description: '`up` when the dependency answered within its deadline (database 2 s, Redis 1 s), else `down`' }),
    ms: z.number().openapi({ description: 'How long the check took, in milliseconds', example: 1.2 }),
  })
  .openapi('ReadyCheck', { description: 'One dependency checked' });

const Checks = z
  .object({
    database: Check.extend({
      kind: z.enum(['pglite', 'postgres']).openapi({ description: '`pglite` (embedded, in `DATA_DIR`) or `postgres` (`DATABASE_URL`)' }),
    }).openapi({ description: 'The database: `select 1`' }),
    redis: Check.optional().openapi({ description: 'Redis: a PING; present only when `REDIS_URL` is set' }),
  })
  .openapi('ReadyChecks', { description: 'Each dependency this process needs, checked now' });

const Ready = z
  .object({
    status: z.literal('ready').openapi({ description: 'Every dependency answered: this process can take traffic' }),
    checks: Checks,
  })
  .openapi('Ready');

const NotReady = z
  .object({
    error: z.string().openapi({ description: 'A sentence naming what is down, e.g. "Not ready: redis is down"' }),
    code: z.literal('not_ready').openapi({ description: 'Always `not_ready`' }),
    details: z
      .object({
        down: z.array(z.enum(['database', 'redis'])).openapi({ description: 'The dependencies that did not answer' }),
        checks: Checks,
      })
      .openapi({ description: 'What is down, and every check' }),
  })
  .openapi('NotReady', { description: 'The error envelope, naming what is down' });

const readyRoute = createRoute({
  method: 'get',
  path: '/health/ready',
  tags: ['health'],
  summary: 'Readiness: the database and, when configured, Redis answer',
  description:
    'For a load balancer or an orchestrator: 200 when this process can serve (the database answers `select 1` within 2 s and, when `REDIS_URL` is set, Redis answers a PING within 1 s); 503 naming what is down otherwise. `/health` stays the liveness check.',
  responses: {
    200: { description: 'Ready', content: { 'application/json': { schema: Ready } } },
    503: { description: 'A dependency is down', content: { 'application/json': { schema: NotReady } } },
  },
});

/** The dependencies a readiness check pings (the container's database and Redis connection). */
export interface ReadyDeps {
  database: Database;
  /** Null without REDIS_URL; only `status` and `ping` are used. */
  redis: { status: string; ping(): Promise<string> } | null;
}

async function within(deadlineMs: number, work: () => Promise<unknown>): Promise<{ status: 'up' | 'down'; ms: number }> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      work(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error('timeout')), deadlineMs);
        timer.unref();
      }),
    ]);
    return { status: 'up', ms: Math.round((performance.now() - started) * 10) / 10 };
  } catch {
    return { status: 'down', ms: Math.round((performance.now() - started) * 10) / 10 };
  } finally {
    clearTimeout(timer);
  }
}

export function mountReady<E extends Env>(app: OpenAPIHono<E>, deps: ReadyDeps): void {
  app.openapi(readyRoute, async (c) => {
    const { database, redis } = deps;
    const [db, cache] = await Promise.all([
      within(READY_DEADLINE_MS.database, () => database.query('select 1')),
      redis
        ? within(READY_DEADLINE_MS.redis, () =>
            // A client that is not connected would queue the PING until it reconnects: down at once.
            redis.status === 'ready' ? redis.ping() : Promise.reject(new Error(`redis ${redis.status}`)),
          )
        : Promise.resolve(undefined),
    ]);
    const checks = { database: { ...db, kind: database.kind }, ...(cache ? { redis: cache } : {}) };
    const down = [...(db.status === 'down' ? (['database'] as const) : []), ...(cache?.status === 'down' ? (['redis'] as const) : [])];
    if (down.length === 0) return c.json({ status: 'ready' as const, checks }, 200);
    return c.json({ error: `Not ready: ${down.join(' and ')} ${down.length > 1 ? 'are' : 'is'} down`, code: 'not_ready' as const, details: { down, checks } }, 503);
  });
}
