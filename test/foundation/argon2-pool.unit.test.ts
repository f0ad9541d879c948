/**
 * The password-hashing threads (platform/argon2-pool.ts): the same Argon2id as the library's own
 * functions (hashes verify both ways), wrong and malformed input answered, and a burst spread over
 * one worker per core with every answer back; while the API is saturated, one hash at a time with a
 * pause after each.
 */
import { describe, expect, it } from 'vitest';
import { hash, verify } from '@node-rs/argon2';
import { argon2Hash, argon2Verify, hashesYieldTo, hashPoolLoad, hashQueueDepth, HASH_THREADS, HashWorkerLost, stopHashWorkers } from '../../src/platform/argon2-pool.js';
import { verifyPassword } from '../../src/modules/identity/passwords.js';

describe('argon2 hashing threads', () => {
  it('hashes Argon2id with the library defaults, and its hashes and the library\'s verify both ways', async () => {
    const stored = await argon2Hash('correct horse battery staple');
    expect(stored).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$/);
    expect(await verify(stored, 'correct horse battery staple')).toBe(true);
    expect(await argon2Verify(stored, 'correct horse battery staple')).toBe(true);
    expect(await argon2Verify(stored, 'Correct horse battery staple')).toBe(false);
    const fromLibrary = await hash('another one');
    expect(await argon2Verify(fromLibrary, 'another one')).toBe(true);
  });

  it('rejects a malformed hash without harming the pool', async () => {
    await expect(argon2Verify('not-a-hash', 'x')).rejects.toThrow();
    const stored = await argon2Hash('still working');
    expect(await argon2Verify(stored, 'still working')).toBe(true);
  });

  it('spreads a burst over one worker per core and answers every job', async () => {
    const stored = await argon2Hash('burst');
    const jobs = Array.from({ length: HASH_THREADS * 3 + 1 }, (_, i) => argon2Verify(stored, i % 2 === 0 ? 'burst' : 'wrong'));
    const load = hashPoolLoad();
    expect(load).toHaveLength(HASH_THREADS);
    expect(Math.max(...load) - Math.min(...load)).toBeLessThanOrEqual(1);
    const answers = await Promise.all(jobs);
    expect(answers).toEqual(jobs.map((_, i) => i % 2 === 0));
    expect(hashPoolLoad().every((n) => n === 0)).toBe(true);
  });

  it('while the API is saturated, gives the threads one hash at a time and pauses after each before the next', async () => {
    const stored = await argon2Hash('paced');
    const stop = hashesYieldTo(() => true);
    const given = () => hashPoolLoad().reduce((a, b) => a + b, 0);
    try {
      const jobs = [argon2Verify(stored, 'paced'), argon2Verify(stored, 'wrong'), argon2Verify(stored, 'paced')];
      expect(given()).toBeLessThanOrEqual(1);
      // When the first answers, the next is not given at once: the pause (a multiple of that hash's time) runs first.
      const atFirstAnswer = await jobs[0]!.then(() => ({ given: given(), inHand: hashQueueDepth() }));
      expect(atFirstAnswer).toEqual({ given: 0, inHand: 2 });
      expect(await Promise.all(jobs)).toEqual([true, false, true]);
    } finally {
      stop();
    }
  });

  it('fails jobs in hand when a worker is lost, as a fault and not as a wrong password, then starts new workers', async () => {
    const stored = await argon2Hash('lost');
    const inFlight = expect(verifyPassword(stored, 'lost')).rejects.toBeInstanceOf(HashWorkerLost);
    await stopHashWorkers();
    await inFlight;
    expect(await verifyPassword(stored, 'lost')).toBe(true);
    expect(await verifyPassword(stored, 'wrong')).toBe(false);
    expect(await verifyPassword('not-a-hash', 'lost')).toBe(false);
  });
});
