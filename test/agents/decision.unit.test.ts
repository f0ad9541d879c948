import { describe, expect, it } from 'vitest';
import { cohortBucket, compareVersions, DECISION_RULES, decideComponent, decideUpdate, decisionDetail, inCohort, insideWindow, type DecisionInput } from '../../src/modules/agents/decision.js';

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
    expect(decideUpdate({ ...base, pins: { org: { agent: '1.1.0' } }, blocked: failedAgent })).toMatchObject({ component: 'watchdog' });
    // Another version of the same component is not blocked.
    expect(decideUpdate({ ...both, blocked: (c, v) => c === 'agent' && v === '1.0.9' })).toMatchObject({ component: 'agent', version: '1.1.0' });
  });
});

describe('the decision of each component: the precedence table', () => {
  const target = (version = '2.0.0', extra: Partial<{ rolloutPercent: number; rolloutStatus: 'active' | 'halted'; rings: { groups: string[]; open: number } }> = {}) => () => ({
    version, rolloutPercent: 100, rolloutStatus: 'active' as const, ...extra,
  });
  const builds = new Set(['1.5.0', '1.6.0', '1.7.0', '1.8.0', '1.9.0', '2.0.0']);
  const base: DecisionInput = {
    deviceId: 'd1', os: 'linux', arch: 'amd64', components: { agent: '1.0.0' }, autoUpdate: true, updateNow: false, window: null, pins: {},
    now: at('2026-11-23T12:00:00Z'), // a Monday
    target: target(),
    build: (v) => (builds.has(v) ? { url: `https://x/${v}`, sha256: 'a'.repeat(64), size: 1 } : undefined),
  };
  const all = { device: { agent: '1.5.0' }, group: { agent: '1.6.0' }, site: { agent: '1.7.0' }, org: { agent: '1.8.0' }, partner: { agent: '1.9.0' } };
  const closed = { days: ['sun' as const], start: '01:00', end: '02:00' };
  const notInCohort = ['d1', 'd2', 'd3', 'd4', 'd5', 'd6'].find((id) => !inCohort(id, '2.0.0', 1)) ?? '';

  const cases: [string, Partial<DecisionInput>, { offer: string | null; rule: string; detail?: string }][] = [
    ['the device pin wins over every level below', { pins: all }, { offer: '1.5.0', rule: 'pinned_device', detail: 'Pinned by the device to 1.5.0' }],
    ['the group pin wins over site, organisation, partner and target', { pins: { ...all, device: null } }, { offer: '1.6.0', rule: 'pinned_group', detail: 'Pinned by device group Finance-PCs to 1.6.0' }],
    ['the site pin wins over organisation, partner and target', { pins: { site: all.site, org: all.org, partner: all.partner } }, { offer: '1.7.0', rule: 'pinned_site' }],
    ['the organisation pin wins over partner and target', { pins: { org: all.org, partner: all.partner } }, { offer: '1.8.0', rule: 'pinned_org' }],
    ['the partner pin wins over the target', { pins: { partner: all.partner } }, { offer: '1.9.0', rule: 'pinned_partner' }],
    ['no pin: the fleet target', {}, { offer: '2.0.0', rule: 'rollout', detail: 'Fleet target 2.0.0 (rollout at 100%)' }],
    ['a pin of another component leaves this one to the target', { pins: { device: { helper: '1.5.0' } } }, { offer: '2.0.0', rule: 'rollout' }],
    ['pinned to the installed version: nothing offered, the pin named', { components: { agent: '1.6.0' }, pins: { group: all.group, org: all.org } }, { offer: null, rule: 'pinned_group', detail: 'Pinned by device group Finance-PCs to 1.6.0 (installed)' }],
    ['a pin to a version without a build for the platform: nothing, not the target either', { pins: { device: { agent: '1.4.0' } } }, { offer: null, rule: 'no_build', detail: 'Pinned by the device to 1.4.0, but there is no build of 1.4.0 for this platform' }],
    ['a target without a build for the platform', { target: target('2.1.0') }, { offer: null, rule: 'no_build' }],
    ['no target for the platform', { target: () => undefined }, { offer: null, rule: 'no_build', detail: 'No fleet target for this platform' }],
    ['a blocked target version', { blocked: (_c, v) => v === '2.0.0' }, { offer: null, rule: 'blocked' }],
    ['a blocked pinned version: not the target either', { pins: { site: all.site }, blocked: (_c, v) => v === '1.7.0' }, { offer: null, rule: 'blocked' }],
    ['outside the window: the target waits', { window: closed }, { offer: null, rule: 'outside_window' }],
    ['outside the window: a pin waits too', { window: closed, pins: { org: all.org } }, { offer: null, rule: 'outside_window', detail: 'Pinned by organisation Acme to 1.8.0; waiting for the maintenance window' }],
    ['update-now skips the window for the target', { window: closed, updateNow: true }, { offer: '2.0.0', rule: 'rollout' }],
    ['a halted rollout', { target: target('2.0.0', { rolloutStatus: 'halted' }) }, { offer: null, rule: 'halted', detail: 'The rollout of 2.0.0 is halted' }],
    ['a halted rollout does not stop a pin', { target: target('2.0.0', { rolloutStatus: 'halted' }), pins: { partner: all.partner } }, { offer: '1.9.0', rule: 'pinned_partner' }],
    ['not yet in the cohort', { deviceId: notInCohort, target: target('2.0.0', { rolloutPercent: 1 }) }, { offer: null, rule: 'rollout' }],
    ['up to date', { components: { agent: '2.0.0' } }, { offer: null, rule: 'up_to_date' }],
    // Rings (docs/decisions.md "Agent update rings"): ring 1 is g1, ring 2 is g2.
    ['rings: a device in the open ring 1 is offered the target', { deviceGroupId: 'g1', target: target('2.0.0', { rings: { groups: ['g1', 'g2'], open: 1 } }) }, { offer: '2.0.0', rule: 'rollout', detail: 'Fleet target 2.0.0 (ring 1, Finance-PCs)' }],
    ['rings: a device of ring 2 waits while only ring 1 is open', { deviceGroupId: 'g2', target: target('2.0.0', { rings: { groups: ['g1', 'g2'], open: 1 } }) }, { offer: null, rule: 'ring_waiting', detail: 'The fleet target is 2.0.0; waiting for ring 2 (Finance-PCs) (1 of 2 rings open)' }],
    ['rings: ring 2 open offers it to ring 2', { deviceGroupId: 'g2', target: target('2.0.0', { rings: { groups: ['g1', 'g2'], open: 2 } }) }, { offer: '2.0.0', rule: 'rollout' }],
    ['rings: a device in no ring waits for the last ring', { deviceGroupId: 'g9', target: target('2.0.0', { rings: { groups: ['g1', 'g2'], open: 2 } }) }, { offer: null, rule: 'ring_waiting', detail: 'The fleet target is 2.0.0; waiting for its rings to finish (2 of 2 rings open)' }],
    ['rings: a device in no group waits too', { deviceGroupId: null, target: target('2.0.0', { rings: { groups: ['g1'], open: 1 } }) }, { offer: null, rule: 'ring_waiting' }],
    ['rings done: the rest of the fleet gets it', { deviceGroupId: 'g9', target: target('2.0.0', { rings: { groups: ['g1', 'g2'], open: 3 } }) }, { offer: '2.0.0', rule: 'rollout' }],
    ['rings done: then the percent applies to devices in no ring', { deviceId: notInCohort, target: target('2.0.0', { rolloutPercent: 1, rings: { groups: ['g1'], open: 2 } }) }, { offer: null, rule: 'rollout' }],
    ['rings: a device of an open ring skips the cohort', { deviceId: notInCohort, deviceGroupId: 'g1', target: target('2.0.0', { rolloutPercent: 1, rings: { groups: ['g1'], open: 1 } }) }, { offer: '2.0.0', rule: 'rollout' }],
    ['rings: update-now does not open a ring', { deviceGroupId: 'g2', updateNow: true, target: target('2.0.0', { rings: { groups: ['g1', 'g2'], open: 1 } }) }, { offer: null, rule: 'ring_waiting' }],
    ['rings: the window still applies in an open ring', { deviceGroupId: 'g1', window: closed, target: target('2.0.0', { rings: { groups: ['g1'], open: 1 } }) }, { offer: null, rule: 'outside_window' }],
    ['rings: a halted rollout offers nothing to ring 1', { deviceGroupId: 'g1', target: target('2.0.0', { rolloutStatus: 'halted', rings: { groups: ['g1'], open: 1 } }) }, { offer: null, rule: 'halted' }],
    ['rings: a pin still wins over a waiting ring', { deviceGroupId: 'g2', pins: { org: all.org }, target: target('2.0.0', { rings: { groups: ['g1', 'g2'], open: 1 } }) }, { offer: '1.8.0', rule: 'pinned_org' }],
    ['auto-update off beats every pin', { autoUpdate: false, pins: all }, { offer: null, rule: 'auto_update_off' }],
    ['a component not reported', { components: {} }, { offer: null, rule: 'not_reported' }],
  ];

  it.each(cases)('%s', (_name, input, want) => {
    const r = decideComponent({ ...base, ...input }, 'agent');
    expect({ offer: r.offer, rule: r.rule }).toEqual({ offer: want.offer, rule: want.rule });
    if (want.detail) expect(decisionDetail(r, { group: 'Finance-PCs', site: 'HQ', org: 'Acme', partner: 'MSP' })).toBe(want.detail);
    // The heartbeat's offer is the same decision.
    const offer = decideUpdate({ ...base, ...input });
    expect(offer?.version ?? null).toBe(want.offer);
  });

  it('every rule of the list is reachable from the table', () => {
    const seen = new Set(cases.map(([, , w]) => w.rule));
    expect(DECISION_RULES.filter((r) => !seen.has(r))).toEqual([]);
  });
});
