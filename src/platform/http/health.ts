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
