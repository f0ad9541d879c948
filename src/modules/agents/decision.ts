import { createHash } from 'node:crypto';
import type { ComponentVersions, MaintenanceWindow, PinnedVersions } from './schema.js';

/**
 * The update decision of a heartbeat, pure: everything it needs is handed in (the caches of
 * state.ts), so it runs without a database statement.
 */

export const COMPONENTS = ['agent', 'helper', 'watchdog'] as const;
export type Component = (typeof COMPONENTS)[number];
export const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] as const;

const HHMM = /^([01]\d|2[0-3]):([0-5]\d)$/;

/** Minutes after midnight of `HH:MM`, or null when malformed. */
export function minutesOf(hhmm: string): number | null {
  const m = HHMM.exec(hhmm);
  return m ? Number(m[1]) * 60 + Number(m[2]) : null;
}

const WEEKDAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const zoneClocks = new Map<string, Intl.DateTimeFormat | null>();

/** Whether `zone` is an IANA time zone name this runtime knows (`Intl`). */
export function knownTimeZone(zone: string): boolean {
  return zoneClock(zone) !== null;
}

function zoneClock(zone: string): Intl.DateTimeFormat | null {
  let f = zoneClocks.get(zone);
  if (f === undefined) {
    try {
      f = new Intl.DateTimeFormat('en-US', { timeZone: zone, weekday: 'short', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
    } catch {
      f = null;
    }
    if (zoneClocks.size < 1000) zoneClocks.set(zone, f);
  }
  return f;
}

/** The weekday (0 = Sunday) and minute of the day of `now` in `zone` (UTC without one); null for an unknown zone. */
function wallClock(now: Date, zone: string | undefined): { day: number; minute: number } | null {
  if (!zone || zone === 'UTC') return { day: now.getUTCDay(), minute: now.getUTCHours() * 60 + now.getUTCMinutes() };
  const f = zoneClock(zone);
  if (!f) return null;
  const parts = Object.fromEntries(f.formatToParts(now).map((p) => [p.type, p.value]));
  return { day: WEEKDAYS.indexOf(parts.weekday ?? ''), minute: Number(parts.hour) * 60 + Number(parts.minute) };
}

/**
 * Whether `now` is inside the window, read on the wall clock of the window's time zone (UTC without
 * one). A window whose end is not after its start crosses midnight and belongs to its start day
 * (`fri 22:00-02:00` covers Friday 22:00 to Saturday 02:00); start equal to end is the whole start day.
 */
export function insideWindow(w: MaintenanceWindow, now: Date): boolean {
  const start = minutesOf(w.start);
  const end = minutesOf(w.end);
  const local = wallClock(now, w.timeZone);
  if (start === null || end === null || local === null) return false; // validated on write; fail closed anyway
  const { day, minute } = local;
  const has = (d: number) => w.days.some((day) => day === DAYS[(d + 7) % 7]);
  if (end > start) return has(day) && minute >= start && minute < end;
  const span = end === start ? 24 * 60 : 24 * 60 - start + end;
  // Today's window (from start on), or yesterday's spilling past midnight.
  if (has(day) && minute >= start) return true;
  return has(day - 1) && minute + 24 * 60 - start < span;
}

/** Stable cohort bucket 0..9999 of a device for a version. */
export function cohortBucket(deviceId: string, version: string): number {
  const h = createHash('sha256').update(`${deviceId}:${version}`).digest();
  return h.readUInt32BE(0) % 10_000;
}

export function inCohort(deviceId: string, version: string, percent: number): boolean {
  if (percent >= 100) return true;
  return cohortBucket(deviceId, version) < Math.round(percent * 100);
}

export interface TargetInfo {
  version: string;
  rolloutPercent: number;
  rolloutStatus: 'active' | 'halted';
}

export interface BuildInfo {
  url: string;
  sha256: string;
  size: number;
  /** Release signature (base64) and the id of the key that verified it; null: unsigned. */
  signature?: string | null;
  keyId?: string | null;
}

export interface DecisionInput {
  deviceId: string;
  os: string | null;
  arch: string | null;
  components: ComponentVersions;
  autoUpdate: boolean;
  updateNow: boolean;
  window: MaintenanceWindow | null;
  pins: PinnedVersions;
  now: Date;
  /** Whether the device failed or rolled back this version and was not retried since: never offered. */
  blocked?: ((component: Component, version: string) => boolean) | undefined;
  target(component: Component, os: string, arch: string): TargetInfo | undefined;
  build(version: string, component: Component, os: string, arch: string): BuildInfo | undefined;
}

export interface Offer extends BuildInfo {
  component: Component;
  version: string;
  /** Offered because of update-now (the flag is consumed). */
  viaUpdateNow: boolean;
}

/**
 * The update to offer, if any: auto-update on; the pinned version (organisation over partner), else the
 * fleet target when the rollout is active and the device is in its cohort; differs from the installed
 * version; not one the device failed or rolled back (until retried); inside the effective window.
 * Update-now skips window and cohort, never auto-update off, a pin or a halted rollout. Components are tried in order; at most one update per answer.
 */
export function decideUpdate(i: DecisionInput): Offer | null {
  if (!i.autoUpdate || !i.os || !i.arch) return null;
  const windowOpen = i.window === null || insideWindow(i.window, i.now);
  for (const component of COMPONENTS) {
    const installed = i.components[component];
    if (installed === undefined) continue;
    const pin = i.pins[component];
    if (pin !== undefined) {
      if (pin === installed || !windowOpen || i.blocked?.(component, pin)) continue;
      const build = i.build(pin, component, i.os, i.arch);
      if (build) return { component, version: pin, ...build, viaUpdateNow: false };
      continue; // a pin without a build for this platform leaves the device alone
    }
    const target = i.target(component, i.os, i.arch);
    if (!target || target.version === installed || target.rolloutStatus === 'halted' || i.blocked?.(component, target.version)) continue;
    const now = i.updateNow;
    if (!now && (!windowOpen || !inCohort(i.deviceId, target.version, target.rolloutPercent))) continue;
    const build = i.build(target.version, component, i.os, i.arch);
    if (build) return { component, version: target.version, ...build, viaUpdateNow: now };
  }
  return null;
}

/** Semantic version order (prerelease below its release); unparsable versions compare as text. */
export function compareVersions(a: string, b: string): number {
  const parse = (v: string) => {
    const [core = '', pre] = v.replace(/^v/, '').split('-', 2);
    return { nums: core.split('.').map((n) => Number(n)), pre };
  };
  const x = parse(a);
  const y = parse(b);
  if (x.nums.some(Number.isNaN) || y.nums.some(Number.isNaN)) return a.localeCompare(b);
  for (let k = 0; k < Math.max(x.nums.length, y.nums.length); k++) {
    const d = (x.nums[k] ?? 0) - (y.nums[k] ?? 0);
    if (d !== 0) return d;
  }
  if (x.pre === undefined && y.pre === undefined) return 0;
  if (x.pre === undefined) return 1;
  if (y.pre === undefined) return -1;
  return x.pre.localeCompare(y.pre, 'en', { numeric: true });
}

export const isPrerelease = (v: string) => v.includes('-');
