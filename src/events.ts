import { newId } from './platform/db/columns.js';
import { clock } from './platform/clock.js';
import type { Tx } from './platform/db/transaction.js';
import type { EventType } from './event-types.js';
import type { z } from 'zod';
import type { KEEL_EVENT_DATA, KeelEmittedType } from './event-catalogue.js';

export { EVENT_TYPES, isEventType, type EventType } from './event-types.js';

/**
 * Typed `data` for the events Keel itself emits, inferred from the catalogue's schemas (the JSON
 * Schemas receivers are given: event-catalogue.ts); other types carry an open object.
 */
export type KnownEventData = { [T in KeelEmittedType]: z.output<(typeof KEEL_EVENT_DATA)[T]> };

export type EventData<T extends EventType> = T extends keyof KnownEventData ? KnownEventData[T] : Record<string, unknown>;

export interface KeelEvent<T extends EventType = EventType> {
  id: string;
  type: T;
  timestamp: string;
  /** Events without an organisation are not routed to webhooks (docs/decisions.md "Webhook shapes"). */
  orgId: string | null;
  data: EventData<T>;
}

export type EventHandler = (tx: Tx, event: KeelEvent) => Promise<void>;

/**
 * The in-process event bus. `publish` runs every subscriber inside the publisher's transaction, so a
 * subscriber's writes (the webhooks module's delivery rows) commit or roll back with the change that
 * caused them (an outbox). Subscribers schedule side effects with `tx.afterCommit`.
 */
export class EventBus {
  readonly #handlers = new Map<EventType | '*', EventHandler[]>();

  /** Subscribers that take only events with an organisation (`orgEventsOnly`). */
  readonly #orgOnly = new WeakSet<EventHandler>();

  /**
   * `orgEventsOnly`: the handler does nothing with an event whose `orgId` is null (webhook routing), so
   * it is not called for one and a publisher of one need not open a transaction for it.
   */
  subscribe(type: EventType | '*', handler: EventHandler, opts: { orgEventsOnly?: boolean } = {}): () => void {
    if (opts.orgEventsOnly) this.#orgOnly.add(handler);
    const list = this.#handlers.get(type) ?? [];
    list.push(handler);
    this.#handlers.set(type, list);
    return () => {
      const l = this.#handlers.get(type);
      if (l) this.#handlers.set(type, l.filter((h) => h !== handler));
    };
  }

  /**
   * True when something would receive `type` (of `orgId`, when given: null counts only the subscribers
   * that take events without an organisation): without a subscriber, a publisher need not open a
   * transaction for it.
   */
  hasSubscribers(type: EventType, orgId?: string | null): boolean {
    return this.subscriberCount(type, orgId) > 0;
  }

  /** How many subscribers receive `type` (a publisher whose only write is one subscriber's single statement needs no transaction). */
  subscriberCount(type: EventType, orgId?: string | null): number {
    return this.#receivers(type, orgId).length;
  }

  #receivers(type: EventType, orgId: string | null | undefined): EventHandler[] {
    const all = [...(this.#handlers.get(type) ?? []), ...(this.#handlers.get('*') ?? [])];
    return orgId === null ? all.filter((h) => !this.#orgOnly.has(h)) : all;
  }

  async publish<T extends EventType>(tx: Tx, type: T, orgId: string | null, data: EventData<T>): Promise<KeelEvent<T>> {
    const event: KeelEvent<T> = { id: newId(), type, timestamp: clock.now().toISOString(), orgId, data };
    for (const handler of this.#receivers(type, orgId)) {
      await handler(tx, event);
    }
    return event;
  }
}
