import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { activeTracer, contextOf } from '../../platform/tracing/index.js';
import type { Attempt, Dispatcher } from './dispatcher.js';
import type { ClaimedDelivery } from './model.js';
import type { AttemptResult } from './queue.js';
import type { RunAttempt } from './slots.js';

/** What an attempt's result becomes: the row's next state, or null when nothing is recorded (released or held). */
export type Decide = (row: ClaimedDelivery, attempt: Attempt) => Promise<AttemptResult | null>;

/**
 * One attempt of a delivery and its recorded result. While tracing is on (docs/deploy.md "Tracing"),
 * the attempt is a span in the trace of the request that caused the delivery, with the outbound
 * request as its child: that request's `traceparent` is stored on the delivery row when it is routed
 * or queued (routing.ts, service.ts), so the attempt continues the trace in whichever process claims
 * the row, retries included.
 */
export function runAttempt(dispatcher: Dispatcher, decide: Decide): RunAttempt {
  if (!activeTracer) return async (row, signal) => decide(row, await dispatcher.attempt(row, signal));
  return async (row, signal) => {
    const tracer = activeTracer;
    if (!tracer) return decide(row, await dispatcher.attempt(row, signal));
    const parent = contextOf(row.traceparent ?? undefined);
    const span = tracer.startSpan(
      'webhook delivery',
      {
        kind: SpanKind.CONSUMER,
        attributes: { 'keel.org_id': row.orgId, 'keel.webhook_id': row.webhookId, 'keel.delivery_id': row.id, 'keel.event_type': row.eventType, 'keel.delivery.attempt': row.attempts + 1 },
      },
      parent,
    );
    try {
      const result = await decide(row, await context.with(trace.setSpan(parent, span), () => dispatcher.attempt(row, signal)));
      span.setAttribute('keel.delivery.status', result?.status ?? 'released');
      if (result && result.status !== 'delivered') span.setStatus({ code: SpanStatusCode.ERROR });
      return result;
    } catch (err) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.name : 'error' });
      throw err;
    } finally {
      span.end();
    }
  };
}
