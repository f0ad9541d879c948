import { describe, expect, it } from 'vitest';
import { cohortBucket, compareVersions, decideUpdate, inCohort, insideWindow, type DecisionInput } from '../../src/modules/agents/decision.js';

const at = (iso: string) => new Date(iso);

describe('maintenance windows (UTC)', () => {
  it('a window within a day: start inclusive, end exclusive, only on its days', () => {
    const w = { days: ['mon' as const], start: '09:00', end: '10:00' };
    expect(insideWindow(w, at('2026-11-23T09:00:00Z'))).toBe(true); // Monday
    expect(insideWindow(w, at('2026-11-23T09:59:59Z'))).toBe(true);
    expect(insideWindow(w, at('2026-11-23T10:00:00Z'))).toBe(false);
    expect(insideWindow(w, at('2026-11-24T09:30:00Z'))).toBe(false); // Tuesday
  });

  it('across midnight, Saturday into Sunday and Sunday into Monday (the week wraps)', () => {
    const sat = { days: ['sat' as const], start: '23:00', end: '01:00' };
    expect(insideWindow(sat, at('2026-11-21T23:30:00Z'))).toBe(true);
    expect(insideWindow(sat, at('2026-11-22T00:30:00Z'))).toBe(true); // Sunday morning: Saturday's
    expect(insideWindow(sat, at('2026-11-22T23:30:00Z'))).toBe(false); // Sunday evening: none
    const sun = { days: ['sun' as const], start: '22:00', end: '02:00' };
    expect(insideWindow(sun, at('2026-11-23T01:59:00Z'))).toBe(true); // Monday 01:59
    expect(insideWindow(sun, at('2026-11-23T02:00:00Z'))).toBe(false);
  });

  it('start equal to end is the whole start day', () => {
    const w = { days: ['tue' as const], start: '06:00', end: '06:00' };
    expect(insideWindow(w, at('2026-11-24T06:00:00Z'))).toBe(true);
    expect(insideWindow(w, at('2026-11-25T05:59:00Z'))).toBe(true);
    expect(insideWindow(w, at('2026-11-25T06:00:00Z'))).toBe(false);
    expect(insideWindow(w, at('2026-11-24T05:59:00Z'))).toBe(false);
  });

  it('a malformed window that slipped past validation is never "any time"', () => {
    expect(insideWindow({ days: ['mon'], start: '25:00', end: '26:00' }, at('2026-11-23T12:00:00Z'))).toBe(false);
  });
});

describe('versions and cohorts', () => {
  it('orders semantic versions, a prerelease below its release', () => {
    expect(compareVersions('1.10.0', '1.9.9')).toBeGreaterThan(0);
    expect(compareVersions('1.5.0-rc.1', '1.5.0')).toBeLessThan(0);
    expect(compareVersions('1.5.0-rc.10', '1.5.0-rc.2')).toBeGreaterThan(0);
    expect(compareVersions('v2.0.0', '2.0.0')).toBe(0);
  });

  it('cohorts are stable per device and version, and about the right size', () => {
    const ids = Array.from({ length: 20_000 }, (_, i) => `00000000-0000-7000-8000-${String(i).padStart(12, '0')}`);
    const tenPercent = ids.filter((id) => inCohort(id, '2.0.0', 10)).length;
    expect(tenPercent).toBeGreaterThan(1_800);
    expect(tenPercent).toBeLessThan(2_200);
    expect(cohortBucket(ids[0]!, '2.0.0')).toBe(cohortBucket(ids[0]!, '2.0.0'));
    // A wider rollout keeps everyone who was in.
    expect(ids.filter((id) => inCohort(id, '2.0.0', 10) && !inCohort(id, '2.0.0', 50))).toEqual([]);
  });
});

describe('the decision', () => {
  const base: DecisionInput = {
    deviceId: 'd1', os: 'linux', arch: 'amd64', components: { agent: '1.0.0', watchdog: '1.0.0' }, autoUpdate: true, updateNow: false, window: null, pins: {},
    now: at('2026-11-23T12:00:00Z'),
    target: (c) => (c === 'watchdog' ? { version: '1.1.0', rolloutPercent: 100, rolloutStatus: 'active' } : undefined),
    build: (v) => ({ url: `https://x/${v}`, sha256: 'a'.repeat(64), size: 1 }),
  };

  it('tries components in order and offers one', () => {
    expect(decideUpdate(base)).toMatchObject({ component: 'watchdog', version: '1.1.0' });
  });

  it('a halted rollout offers nothing, update-now included', () => {
    const halted: DecisionInput = { ...base, updateNow: true, target: () => ({ version: '1.1.0', rolloutPercent: 100, rolloutStatus: 'halted' }) };
    expect(decideUpdate(halted)).toBeNull();
  });

  it('update-now skips the window and the cohort, not auto-update off', () => {
    const closed: DecisionInput = { ...base, window: { days: ['sun'], start: '01:00', end: '02:00' }, target: () => ({ version: '1.1.0', rolloutPercent: 1, rolloutStatus: 'active' }) };
    const outside = ['d1', 'd2', 'd3', 'd4', 'd5'].find((id) => !inCohort(id, '1.1.0', 1)) ?? '';
    expect(decideUpdate({ ...closed, deviceId: outside })).toBeNull();
    // Window open: the cohort alone keeps a device outside it from the update.
    expect(decideUpdate({ ...closed, window: null, deviceId: outside })).toBeNull();
    expect(decideUpdate({ ...closed, updateNow: true })).toMatchObject({ version: '1.1.0', viaUpdateNow: true });
    expect(decideUpdate({ ...closed, updateNow: true, autoUpdate: false })).toBeNull();
  });

  it('a version the device failed or rolled back is not offered again (target or pin), update-now included; another component still is', () => {
    const both: DecisionInput = { ...base, target: () => ({ version: '1.1.0', rolloutPercent: 100, rolloutStatus: 'active' }) };
    const failedAgent = (c: string, v: string) => c === 'agent' && v === '1.1.0';
    expect(decideUpdate(both)).toMatchObject({ component: 'agent', version: '1.1.0' });
    expect(decideUpdate({ ...both, blocked: failedAgent })).toMatchObject({ component: 'watchdog', version: '1.1.0' });
    expect(decideUpdate({ ...both, blocked: failedAgent, updateNow: true })).toMatchObject({ component: 'watchdog' });
    expect(decideUpdate({ ...both, blocked: () => true })).toBeNull();
    expect(decideUpdate({ ...base, pins: { agent: '1.1.0' }, blocked: failedAgent })).toMatchObject({ component: 'watchdog' });
    // Another version of the same component is not blocked.
    expect(decideUpdate({ ...both, blocked: (c, v) => c === 'agent' && v === '1.0.9' })).toMatchObject({ component: 'agent', version: '1.1.0' });
  });
});
