import { describe, expect, it } from 'vitest';
import { warmHttpPath } from '../../src/platform/http/warm-up.js';

describe('the HTTP warm-up of keel serve on PostgreSQL or Redis', () => {
  it('answers its loopback requests from a worker thread, then closes its server and worker', async () => {
    const handles = () => (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles().length;
    const before = handles();
    expect(await warmHttpPath(200)).toBe(200);
    await expect.poll(handles, { timeout: 30_000 }).toBeLessThanOrEqual(before);
  });
});
