import type { Keel } from '../../keel.js';
import { loggableError } from '../../platform/safe-error.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import { DELIVERY_LIST, DeliveryEngine, LIST_CAP } from './engine.js';
import { RETENTION_SWEEP_MS, sweepDeliveries } from './retention.js';
import { advanceReplays, REPLAY_TICK_MS } from './replay.js';
import { routeEvent } from './routing.js';
import { createRouter, type Router } from './inbox.js';
import { defineWebhookLimits, webhooksRuntime, type RuntimeHooks, type WebhookLimits } from './service.js';
import { intervalJob, type KeelModule } from '../../platform/module.js';

/** The gauge of deliveries waiting (README "Operating"). */
export const QUEUE_DEPTH_METRIC = 'keel_webhook_queue_depth';
const QUEUE_DEPTH = prepared('webhooks_queue_depth', "select count(*)::int as n from webhook_deliveries where status in ('pending', 'retrying')");
/** The gauge of published events stored and not yet routed (inbox.ts; README "Operating"). */
export const INBOX_DEPTH_METRIC = 'keel_webhook_inbox_depth';
const INBOX_DEPTH = prepared('webhooks_inbox_depth', 'select count(*)::int as n from webhook_inbox');

/** PostgreSQL without Redis: workers of other processes are woken by NOTIFY on this channel. */
export const NOTIFY_CHANNEL = 'keel_webhooks';

export interface Webhooks {
  engine: DeliveryEngine;
  /** What the service and the router reach the engine through (wake-ups, claims for routed rows). */
  runtime: RuntimeHooks;
  /** The inbox of published events, its router and their counters (inbox.ts). */
  router: Router;
  limits: WebhookLimits;
  /** Starts the delivery engine in this process, and the inbox's sweep (the `webhooks.delivery` job of the worker role). */
  startWorker(): Promise<void>;
  /** Stops it: graceful lets attempts in flight finish; otherwise they are cancelled and released. */
  stopWorker(opts?: { graceful: boolean }): Promise<void>;
}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    webhooks: Webhooks;
  }
}

/** The webhooks module of a Keel (tests reach the engine through it). */
export function webhooksOf(keel: Keel): Webhooks {
  return keel.modules.get('webhooks');
}

/**
 * Installs the webhooks module: subscribes the event router to the bus and creates (without starting)
 * the delivery engine. Its jobs, both of the worker role: the delivery engine (with its wake-ups from
 * other processes) and the hourly retention sweep. The engine is cancelled when the Keel closes, also
 * when it was started through the handle rather than as a job.
 */
export function installWebhooks(keel: Keel): KeelModule<Webhooks> {
  const engine = new DeliveryEngine(keel, {
    concurrency: keel.config.WEBHOOK_CONCURRENCY,
    perWebhook: keel.config.WEBHOOK_CONCURRENCY_PER_WEBHOOK,
    timeoutMs: keel.config.WEBHOOK_TIMEOUT_MS,
  });
  // Events without an organisation are not routed (routing.ts `routeEvent`): their publishers need no transaction for it.
  keel.events.subscribe('*', (tx, event) => routeEvent(keel, tx, event), { orgEventsOnly: true });
  // Deliveries waiting (pending or retrying, due or not): one COUNT over the partial due index, on each scrape.
  keel.metrics.gauge(QUEUE_DEPTH_METRIC, 'Webhook deliveries waiting to be attempted (pending or retrying), across every process', [], async (g) => {
    const [row] = await rawQuery<{ n: number }>(keel.db, QUEUE_DEPTH, []);
    g.set({}, row?.n ?? 0);
  });
  // Events a saturated API stored for the router: near zero except during and just after a burst.
  keel.metrics.gauge(INBOX_DEPTH_METRIC, 'Published webhook events stored and not yet routed to their webhooks, across every process', [], async (g) => {
    const [row] = await rawQuery<{ n: number }>(keel.db, INBOX_DEPTH, []);
    g.set({}, row?.n ?? 0);
  });
  const hints = keel.redis ? redisHints(keel, keel.redis, engine) : null;
  const runtime: RuntimeHooks = {
    ticket: () => engine.ticket(),
    accept: (rows) => engine.accept(rows),
    announce(ids, webhookIds) {
      engine.wake(webhookIds);
      // Other processes: a Redis hint (delivery ids only), or a NOTIFY on PostgreSQL without Redis.
      if (hints) hints.push(ids);
      else if (keel.database.kind === 'postgres') {
        // The payload names the webhooks (NOTIFY payloads stay under 8,000 bytes).
        keel.database.notify(NOTIFY_CHANNEL, webhookIds.slice(0, 200).join(',')).catch(() => undefined);
      }
    },
    wake() {
      engine.wake();
      if (keel.redis) keel.redis.lpush(DELIVERY_LIST, 'wake').catch(() => undefined);
      else if (keel.database.kind === 'postgres') keel.database.notify(NOTIFY_CHANNEL, '').catch(() => undefined);
    },
  };
  const router = createRouter(keel);
  const webhooks: Webhooks = {
    engine,
    runtime,
    router,
    limits: defineWebhookLimits(keel),
    async startWorker() {
      if (engine.running) return;
      await engine.start();
      await listenForWakeUps(keel, engine, hints);
      // The inbox's sweep (events of a process that stopped between storing and routing them, or
      // left at start-up); after the engine, so its first pass claims for it (inbox.ts).
      router.router.start();
    },
    async stopWorker(opts = { graceful: true }) {
      await router.router.stop();
      await engine.stop(opts);
    },
  };
  keel.onClose(() => webhooks.stopWorker({ graceful: false }));
  keel.onClose(() => router.router.stop());
  return {
    handle: webhooks,
    jobs: [
      { name: 'webhooks.delivery', roles: ['worker'], start: () => webhooks.startWorker(), stop: (opts) => webhooks.stopWorker(opts) },
      // Finished deliveries past WEBHOOK_DELIVERY_RETENTION_DAYS and orphaned payloads, hourly.
      intervalJob({
        name: 'webhooks.retention',
        roles: ['worker'],
        everyMs: RETENTION_SWEEP_MS,
        run: () => sweepDeliveries(keel),
        failed: (err) => keel.log.warn({ error: loggableError(err) }, 'webhooks: retention sweep failed (tried again within the hour)'),
      }),
      // Running replays, a few batches each per tick (replay.ts).
      intervalJob({
        name: 'webhooks.replay',
        roles: ['worker'],
        everyMs: REPLAY_TICK_MS,
        run: () => advanceReplays(keel),
        failed: (err) => keel.log.warn({ error: loggableError(err) }, 'webhooks: replay tick failed (tried again on the next)'),
      }),
    ],
  };
}

interface RedisHints {
  /** Hints for these new deliveries: pushed once per tick, with every other announcement of the tick. */
  push(ids: string[]): void;
  /** The ids of a popped batch that another process pushed (this one's own were woken for already). */
  foreign(ids: string[]): string[];
}

/** Most delivery ids remembered as this process's own hints (past it they are forgotten, costing one lookup). */
const OWN_HINTS_MAX = 100_000;

function redisHints(keel: Keel, redis: NonNullable<Keel['redis']>, engine: DeliveryEngine): RedisHints {
  let pending: string[] = [];
  let own = new Set<string>();
  const send = () => {
    const ids = pending;
    pending = [];
    redis
      .multi()
      .lpush(DELIVERY_LIST, ...ids)
      .ltrim(DELIVERY_LIST, 0, LIST_CAP - 1)
      .exec()
      .catch((err: unknown) => keel.log.warn({ error: loggableError(err) }, 'webhooks: wake-up hint not pushed to Redis (the safety sweep finds the deliveries)'));
  };
  return {
    push(ids) {
      if (ids.length === 0) return;
      if (pending.length === 0) setImmediate(send);
      for (const id of ids) pending.push(id);
      if (!engine.running) return;
      if (own.size + ids.length > OWN_HINTS_MAX) own = new Set();
      for (const id of ids) own.add(id);
    },
    foreign: (ids) => ids.filter((id) => !own.delete(id)),
  };
}

/** Wake-ups from other processes: BRPOP on the Redis list, or LISTEN on PostgreSQL without Redis. */
async function listenForWakeUps(keel: Keel, engine: DeliveryEngine, hints: RedisHints | null): Promise<void> {
  if (keel.redis) {
    // A blocking pop needs a connection of its own.
    const blocking = keel.redis.duplicate();
    blocking.on('error', () => undefined);
    const state = { open: true };
    const isOpen = (): boolean => state.open;
    engine.onStop(() => {
      state.open = false;
      blocking.disconnect();
    });
    void (async () => {
      while (isOpen()) {
        try {
          const got = await blocking.brpop(DELIVERY_LIST, 5);
          if (!isOpen()) break;
          if (got) {
            // Drain the other hints: one claim serves them all.
            const more = (await blocking.rpop(DELIVERY_LIST, 1_000)) ?? [];
            // This process's own hints: their webhooks were woken when they were announced.
            const foreign = hints ? hints.foreign([got[1], ...more]) : [got[1], ...more];
            if (foreign.length > 0) await engine.hinted(foreign);
          }
        } catch {
          if (!isOpen()) break;
          await new Promise((r) => setTimeout(r, 1_000));
        }
      }
    })();
    return;
  }
  if (keel.database.kind === 'postgres') {
    const unlisten = await keel.database.listen(NOTIFY_CHANNEL, (payload) => {
      const ids = payload.split(',').filter((id) => /^[0-9a-f-]{36}$/i.test(id));
      engine.wake(ids.length > 0 ? ids : undefined);
    });
    engine.onStop(unlisten);
  }
}

export { webhooksRuntime };
