import type { Keel } from '../../keel.js';
import { intervalJob, type KeelModule } from '../../platform/module.js';
import type { OutboundPolicy } from '../../platform/outbound.js';
import { rawQuery } from '../../platform/db/raw.js';
import { loggableError } from '../../platform/safe-error.js';
import { sendRound } from './sender.js';
import { streamLagSeconds } from './service.js';

// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface Siem {}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    siem: Siem;
  }
}

/** How often a worker looks for streams with entries to send (each stream: within about this of an entry). */
export const SEND_EVERY_MS = 1000;

export const LAG_METRIC = 'keel_audit_stream_lag_seconds';

/**
 * Audit streaming to a SIEM (docs/decisions.md "Audit streaming"): the sender job of the worker role
 * (every process with the role runs one; the streams' claims keep one sender per stream), and the
 * lag of each stream in `/metrics` (read on each scrape, labelled by the stream's id only).
 */
export function installSiem(keel: Keel): KeelModule<Siem> {
  // Reset on each scrape, so a deleted stream's series goes with it.
  keel.metrics.register((prom, registry) => {
    new prom.Gauge({
      name: LAG_METRIC,
      help: 'Seconds since the oldest audit entry a stream has not sent yet was written (0: caught up)',
      labelNames: ['stream'],
      registers: [registry],
      async collect() {
        const streams = await rawQuery<{ id: string; partner_id: string | null }>(keel.db, 'select id, partner_id from audit_streams order by id', []);
        const lags = await Promise.all(streams.map(async (s) => [s.id, await streamLagSeconds(keel, s.id, s.partner_id)] as const));
        this.reset();
        for (const [stream, lag] of lags) this.set({ stream }, lag);
      },
    });
  });
  const policies = new Map<string, OutboundPolicy>();
  return {
    handle: {},
    jobs: [
      intervalJob({
        name: 'siem.sender',
        roles: ['worker'],
        everyMs: SEND_EVERY_MS,
        run: () => sendRound(keel, policies),
        failed: (err) => keel.log.warn({ error: loggableError(err) }, 'audit stream: a sending round failed (tried again shortly)'),
      }),
    ],
  };
}
