import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, type Logger } from '../../src/platform/logger.js';
import { loggableError } from '../../src/platform/safe-error.js';

/**
 * An error reaches a log line in one shape, `{ error: loggableError(err) }` (platform/logger.ts
 * `LogFields`). The wrong calls below are type errors: `npx tsc --noEmit` compiles this file, and
 * each `@ts-expect-error` fails the compile the day its line type-checks.
 */
function wrongCalls(log: Logger, err: unknown): void {
  // @ts-expect-error a string is not a logged error
  log.error({ error: 'connection terminated' }, 'sweep failed');
  // @ts-expect-error a message taken from the error is a string too
  log.warn({ error: (err as Error).message }, 'sweep failed');
  // @ts-expect-error pino's `err` key
  log.error({ err }, 'sweep failed');
  // @ts-expect-error an error passed raw
  log.error(new Error('boom'), 'sweep failed');
  // @ts-expect-error a caught value passed raw
  log.error(err, 'sweep failed');
  // @ts-expect-error an object shaped like a logged error, not made by loggableError
  log.info({ error: { name: 'Error', message: 'boom' } }, 'sweep failed');
}

describe('one shape for a logged error', () => {
  it('only { error: loggableError(err) } type-checks, and it logs the allow-listed error', async () => {
    expect(wrongCalls).toBeTypeOf('function'); // compiled, never run
    const lines: Record<string, unknown>[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
        done();
      },
    });
    const log = createLogger('info', {}, stream);
    log.child({ job: 'sweep' }).error({ error: loggableError(Object.assign(new Error('boom'), { code: 'E1', params: ['secret'] })) }, 'sweep failed');
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines[0]).toMatchObject({ job: 'sweep', error: { name: 'Error', message: 'boom', code: 'E1' }, msg: 'sweep failed' });
    expect(JSON.stringify(lines[0])).not.toContain('secret');
  });
});
