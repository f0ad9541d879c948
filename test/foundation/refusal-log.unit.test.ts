/**
 * The aggregated refusal line (platform/http/refusal-log.ts): one line per source, code and second,
 * written when the second is over; past REFUSAL_LOG_SOURCES sources in a second the rest share one
 * `other` line saying how many they were, so a flood from many addresses writes a bounded number of lines.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { REFUSAL_LOG_SOURCES, RefusalLog } from '../../src/platform/http/refusal-log.js';
import { clock } from '../../src/platform/clock.js';
import { RefusalHold } from '../../src/platform/http/refusal-hold.js';

function capture(): { log: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'info' }, new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text) as Record<string, unknown>);
      done();
    },
  }));
  return { log, lines };
}

describe('refusal log', () => {
  afterEach(() => clock.reset());

  it('writes one line per source and code of a second, and sums the sources past the bound on one other line', async () => {
    const { log, lines } = capture();
    const refusals = new RefusalLog(log);
    clock.freeze((Math.floor(Date.now() / 1000) + 10) * 1000);
    const extra = 7;
    for (let i = 0; i < REFUSAL_LOG_SOURCES + extra; i++) {
      // Each source's own count in the second, whether it has a line of its own or shares `other` (refusal-hold.ts paces by it).
      const counts = [0, 1, 2].map(() => refusals.refused(`192.0.2.${i}`, 'POST /api/v1/auth/login', 503, 'overloaded'));
      expect(counts).toEqual([1, 2, 3]);
    }
    refusals.refused('192.0.2.0', 'connection', undefined, 'connection_budget');
    refusals.close();
    await new Promise((r) => setImmediate(r));
    const written = lines.filter((l) => l.msg === 'requests refused');
    // The bound counts lines: the connection line of 192.0.2.0 arrived after it was reached, so it went to `other` too.
    expect(written).toHaveLength(REFUSAL_LOG_SOURCES + 2);
    expect(written[0]).toMatchObject({ source: '192.0.2.0', refused: 3, status: 503, code: 'overloaded', routes: { 'POST /api/v1/auth/login': 3 } });
    const others = written.filter((l) => l.source === 'other');
    expect(others).toEqual([
      expect.objectContaining({ code: 'overloaded', sources: extra, refused: 3 * extra }),
      expect.objectContaining({ code: 'connection_budget', sources: 1, refused: 1, routes: { connection: 1 } }),
    ]);
    expect(others[1]).not.toHaveProperty('status');
  });
});

describe('refusal hold', () => {
  afterEach(() => clock.reset());

  it('answers a source\'s refusals within the allowance at once, holds the rest up to its bound, and sends the held ones when closed', async () => {
    clock.freeze();
    const hold = new RefusalHold(2, 3);
    const answers = [1, 2, 3, 4, 5, 6].map((n) => hold.answer(n, () => n));
    expect(answers.slice(0, 2)).toEqual([1, 2]);
    expect(answers.slice(2, 5).every((a) => a instanceof Promise)).toBe(true);
    // Past the bound (3 held) a refusal is answered at once.
    expect(answers[5]).toBe(6);
    expect(hold.held).toBe(3);
    hold.close();
    expect(await Promise.all(answers.slice(2, 5) as Promise<number>[])).toEqual([3, 4, 5]);
    expect(hold.held).toBe(0);
    // Off (0): everything at once.
    expect(new RefusalHold(0).answer(1000, () => 'now')).toBe('now');
  });

  it('sends a second\'s held answers over the next second, a tenth on each 100-ms tick, not in one burst', () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      clock.freeze();
      const hold = new RefusalHold(1);
      const sent: number[] = [];
      for (let n = 1; n <= 41; n++) void hold.answer(n, () => sent.push(n));
      expect(sent).toEqual([1]);
      vi.advanceTimersByTime(300); // the second lasts: nothing is sent
      expect(sent).toHaveLength(1);
      clock.advance(1000);
      vi.advanceTimersByTime(100);
      expect(sent).toHaveLength(1 + 4);
      vi.advanceTimersByTime(500);
      expect(sent).toHaveLength(1 + 24);
      vi.advanceTimersByTime(400);
      expect(sent).toEqual(Array.from({ length: 41 }, (_, i) => i + 1));
      expect(hold.held).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});
