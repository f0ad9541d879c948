import type { Keel } from '../../keel.js';
import { loggableError } from '../../platform/safe-error.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import { DELIVERY_LIST, DeliveryEngine, LIST_CAP } from './engine.js';
import { routeEvent, setWebhooksRuntime, webhooksRuntime } from './service.js';

/** The gauge of deliveries waiting (README "Operating"). */
export const QUEUE_DEPTH_METRIC = 'keel_webhook_queue_depth';
const QUEUE_DEPTH = prepared('webhooks_queue_depth', "select count(*)::int as n from webhook_deliveries where status in ('pending', 'retrying')");

/** PostgreSQL without Redis: workers of other processes are woken by NOTIFY on this channel. */
export const NOTIFY_CHANNEL = 'keel_webhooks';

export interface Webhooks {
  engine: DeliveryEngine;
  /** Starts the delivery engine in this process (`keel serve` unless WORKER=off, `keel worker`). */
  startWorker(): Promise<void>;
  /** Stops it: graceful lets attempts in flight finish; otherwise they are cancelled and released. */
  stopWorker(opts?: { graceful: boolean }): Promise<void>;
}

const installed = new WeakMap<Keel, Webhooks>();

/** The webhooks runtime of a Keel instance (tests reach the engine through it). */
export function webhooksOf(keel: Keel): Webhooks {
  const w = installed.get(keel);
  if (!w) throw new Error('webhooks are not installed on this Keel instance');
  return w;
}

/**
 * Subscribes the event router to the bus and creates (without starting) the delivery engine. Called
 * once per Keel instance by createKeel.
 */
export function installWebhooks(keel: Keel): Webhooks {
  const engine = new DeliveryEngine(keel, {
    concurrency: keel.config.WEBHOOK_CONCURRENCY,
    perWebhook: keel.config.WEBHOOK_CONCURRENCY_PER_WEBHOOK,
    timeoutMs: keel.config.WEBHOOK_TIMEOUT_MS,
  });
  keel.events.subscribe('*', (tx, event) => routeEvent(keel, tx, event));
  // Deliveries waiting (pending or retrying, due or not): one COUNT over the partial due index, on each scrape.
  keel.metrics.gauge(QUEUE_DEPTH_METRIC, 'Webhook deliveries waiting to be attempted (pending or retrying), across every process', [], async (g) => {
    const [row] = await rawQuery<{ n: number }>(keel.db, QUEUE_DEPTH, []);
    g.set({}, row?.n ?? 0);
  });
  setWebhooksRuntime(keel, {
    announce(ids, webhookIds) {
      engine.wake(webhookIds);
      // Other processes: a Redis hint (delivery ids only), or a NOTIFY on PostgreSQL without Redis.
      if (keel.redis) {
        keel.redis
          .multi()
          .lpush(DELIVERY_LIST, ...ids)
          .ltrim(DELIVERY_LIST, 0, LIST_CAP - 1)
          .exec()
          .catch((err: unknown) => keel.log.warn({ error: loggableError(err) }, 'webhooks: wake-up hint not pushed to Redis (the safety sweep finds the deliveries)'));
      } else if (keel.database.kind === 'postgres') {
        // The payload names the webhooks (NOTIFY payloads stay under 8,000 bytes).
        keel.database.notify(NOTIFY_CHANNEL, webhookIds.slice(0, 200).join(',')).catch(() => undefined);
      }
    },
    wake() {
      engine.wake();
      if (keel.redis) keel.redis.lpush(DELIVERY_LIST, 'wake').catch(() => undefined);
      else if (keel.database.kind === 'postgres') keel.database.notify(NOTIFY_CHANNEL, '').catch(() => undefined);
    },
  });
  const webhooks: Webhooks = {
    engine,
    async startWorker() {
      if (engine.running) return;
      await engine.start();
      await listenForWakeUps(keel, engine);
    },
    async stopWorker(opts = { graceful: true }) {
      await engine.stop(opts);
    },
  };
  installed.set(keel, webhooks);
  return webhooks;
}

/** Wake-ups from other processes: BRPOP on the Redis list, or LISTEN on PostgreSQL without Redis. */
async function listenForWakeUps(keel: Keel, engine: DeliveryEngine): Promise<void> {
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
            await engine.hinted([got[1], ...more]);
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
