import { newId } from './platform/db/columns.js';
import { clock } from './platform/clock.js';
import type { Tx } from './platform/db/transaction.js';
import type { EventType } from './event-types.js';

export { EVENT_TYPES, isEventType, type EventType } from './event-types.js';

/** Typed `data` for the events Keel itself emits; other types carry an open object. */
export interface KnownEventData {
  'user.login': { userId: string; email: string; sessionId: string; method: 'password' | 'mfa' | 'sso' };
  'user.logout': { userId: string; email: string; sessionId: string | null };
  'user.deactivated': { userId: string; email: string; source: 'scim' };
}

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

  subscribe(type: EventType | '*', handler: EventHandler): () => void {
    const list = this.#handlers.get(type) ?? [];
    list.push(handler);
    this.#handlers.set(type, list);
    return () => {
      const l = this.#handlers.get(type);
      if (l) this.#handlers.set(type, l.filter((h) => h !== handler));
    };
  }

  /** True when something would receive `type`: without a subscriber, a publisher need not open a transaction for it. */
  hasSubscribers(type: EventType): boolean {
    return this.subscriberCount(type) > 0;
  }

  /** How many subscribers receive `type` (a publisher whose only write is one subscriber's single statement needs no transaction). */
  subscriberCount(type: EventType): number {
    return (this.#handlers.get(type)?.length ?? 0) + (this.#handlers.get('*')?.length ?? 0);
  }

  async publish<T extends EventType>(tx: Tx, type: T, orgId: string | null, data: EventData<T>): Promise<KeelEvent<T>> {
    const event: KeelEvent<T> = { id: newId(), type, timestamp: clock.now().toISOString(), orgId, data };
    for (const handler of [...(this.#handlers.get(type) ?? []), ...(this.#handlers.get('*') ?? [])]) {
      await handler(tx, event);
    }
    return event;
  }
}
