import { SpanKind } from '@opentelemetry/api';
import type { Redis } from 'ioredis';
import { childSpan, endWhenSettled } from './index.js';

/** The part of an ioredis command a span needs: its name and its settlement. */
interface CommandLike {
  name: string;
  promise: Promise<unknown>;
}

/**
 * A span per Redis command on Keel's command connection (docs/deploy.md "Tracing"): the command's
 * name only, never its keys or arguments. A command ioredis sends again (after a reconnect) keeps
 * its one span. Installed by platform/redis.ts only while tracing is on.
 */
export function traceRedis(client: Redis): void {
  const send = client.sendCommand.bind(client) as (command: CommandLike, ...rest: unknown[]) => unknown;
  const seen = new WeakSet<CommandLike>();
  (client as unknown as { sendCommand: unknown }).sendCommand = (command: CommandLike, ...rest: unknown[]): unknown => {
    if (!seen.has(command)) {
      seen.add(command);
      const name = command.name.toUpperCase();
      const span = childSpan(name, { 'db.system.name': 'redis', 'db.operation.name': name }, SpanKind.CLIENT);
      // The command's own promise settles with its reply; the span follows it (a rejection is still the caller's).
      if (span) void endWhenSettled(span, command.promise).catch(() => undefined);
    }
    return send(command, ...rest);
  };
}
