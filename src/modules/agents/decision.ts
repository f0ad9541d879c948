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
  /**
   * The promotion's rings (docs/decisions.md "Agent update rings"): the device groups in order and how
   * many are open (1..n; n + 1 once the rest of the fleet is open). Absent: no rings.
   */
  rings?: { groups: readonly string[]; open: number } | undefined;
}

export interface BuildInfo {
  url: string;
  sha256: string;
  size: number;
  /** Release signature (base64) and the id of the key that verified it; null: unsigned. */
  signature?: string | null;
  keyId?: string | null;
}

/** The levels a version pin is set at, strongest first (docs/decisions.md "Agent pins and distribution"). */
export const PIN_LEVELS = ['device', 'group', 'site', 'org', 'partner'] as const;
export type PinLevel = (typeof PIN_LEVELS)[number];
/** The pins of each level that applies to a device (absent or null: none set there). */
export type PinChain = Partial<Record<PinLevel, PinnedVersions | null | undefined>>;

/**
 * Why a component is (or is not) offered a version: the rule that decided, in the order they are tried.
 * `pinned_*`: a pin of that level names the version (offered, or already installed); `rollout`: the
 * fleet target (offered, or the device is not yet in the rollout's cohort); `ring_waiting`: the target's
 * rings have not reached the device (its group's ring, or the rest of the fleet, is not open yet); the
 * others keep the device where it is.
 */
export const DECISION_RULES = [
  'pinned_device', 'pinned_group', 'pinned_site', 'pinned_org', 'pinned_partner', 'rollout', 'ring_waiting', 'outside_window', 'halted', 'blocked', 'no_build', 'up_to_date', 'auto_update_off', 'not_reported',
] as const;
export type DecisionRule = (typeof DECISION_RULES)[number];

export interface DecisionInput {
  deviceId: string;
  os: string | null;
  arch: string | null;
  components: ComponentVersions;
  /** The device's group (rings are device groups); null: in none. */
  deviceGroupId?: string | null | undefined;
  autoUpdate: boolean;
  updateNow: boolean;
  window: MaintenanceWindow | null;
  pins: PinChain;
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

/** The decision for one component: the version offered (null: none), the rule that decided, and what it is about. */
export interface ComponentDecision {
  component: Component;
  offer: string | null;
  rule: DecisionRule;
  /** The version the rule is about (the pin, or the target); null when there is none. */
  version: string | null;
  installed: string | null;
  /** The pin's level, for `pinned_*` and for `blocked` / `no_build` / `outside_window` of a pinned version. */
  pinLevel: PinLevel | null;
  /** The target's rollout percentage, for `rollout`. */
  percent: number | null;
  /** The ring (1-based) of the device's group in the target's rings, for `rollout` and `ring_waiting`; null: in none. */
  ring: number | null;
  /** For `ring_waiting`: how many of how many rings are open. */
  rings: { open: number; count: number } | null;
  build: BuildInfo | null;
  viaUpdateNow: boolean;
}

/** The strongest pin of a component (device over group over site over organisation over partner), or null. */
export function pinOf(pins: PinChain, component: Component): { level: PinLevel; version: string } | null {
  for (const level of PIN_LEVELS) {
    const version = pins[level]?.[component];
    if (version !== undefined) return { level, version };
  }
  return null;
}

/**
 * THE update decision of one component, pure: auto-update on; the strongest pin, else the fleet
 * target when the rollout is active and the device is in its cohort; differs from the installed
 * version; not one the device failed or rolled back (until retried); a build for the platform; inside
 * the effective window. Rings narrow the `rollout` branch only: while the rings are not all done, a
 * device is offered the target only when its group's ring is open (devices in no ring wait for the
 * last ring); a device in a ring skips the cohort. Update-now skips window and cohort, never
 * auto-update off, a pin, a halted rollout or a ring not yet open.
 */
export function decideComponent(i: DecisionInput, component: Component): ComponentDecision {
  const installed = i.components[component] ?? null;
  const d = (rule: DecisionRule, version: string | null, extra: Partial<ComponentDecision> = {}): ComponentDecision => ({
    component, offer: null, rule, version, installed, pinLevel: null, percent: null, ring: null, rings: null, build: null, viaUpdateNow: false, ...extra,
  });
  if (installed === null) return d('not_reported', null);
  if (!i.autoUpdate) return d('auto_update_off', null);
  if (!i.os || !i.arch) return d('no_build', null);
  const windowOpen = i.window === null || insideWindow(i.window, i.now);
  const pin = pinOf(i.pins, component);
  if (pin) {
    const rule = `pinned_${pin.level}` as DecisionRule;
    const about = { pinLevel: pin.level };
    if (pin.version === installed) return d(rule, pin.version, about);
    if (i.blocked?.(component, pin.version)) return d('blocked', pin.version, about);
    const build = i.build(pin.version, component, i.os, i.arch);
    // A pin without a build for this platform leaves the device alone.
    if (!build) return d('no_build', pin.version, about);
    if (!windowOpen) return d('outside_window', pin.version, about);
    return d(rule, pin.version, { ...about, offer: pin.version, build });
  }
  const target = i.target(component, i.os, i.arch);
  if (!target) return d('no_build', null);
  if (target.version === installed) return d('up_to_date', target.version);
  if (target.rolloutStatus === 'halted') return d('halted', target.version);
  if (i.blocked?.(component, target.version)) return d('blocked', target.version);
  const build = i.build(target.version, component, i.os, i.arch);
  if (!build) return d('no_build', target.version);
  const rings = target.rings;
  const position = rings && i.deviceGroupId ? rings.groups.indexOf(i.deviceGroupId) + 1 : 0;
  const ring = { ring: position > 0 ? position : null };
  if (rings && rings.open <= rings.groups.length && !(position > 0 && position <= rings.open)) {
    return d('ring_waiting', target.version, { ...ring, rings: { open: rings.open, count: rings.groups.length } });
  }
  const percent = { percent: target.rolloutPercent, ...ring };
  if (!i.updateNow) {
    if (!windowOpen) return d('outside_window', target.version);
    if (position === 0 && !inCohort(i.deviceId, target.version, target.rolloutPercent)) return d('rollout', target.version, percent);
  }
  return d('rollout', target.version, { ...percent, offer: target.version, build, viaUpdateNow: i.updateNow });
}

/** Every component's decision, in order. */
export function decideAll(i: DecisionInput): ComponentDecision[] {
  return COMPONENTS.map((c) => decideComponent(i, c));
}

/** The update to offer, if any: the first component (in order) whose decision offers a version; at most one update per answer. */
export function decideUpdate(i: DecisionInput): Offer | null {
  for (const component of COMPONENTS) {
    const r = decideComponent(i, component);
    if (r.offer !== null && r.build) return { component, version: r.offer, ...r.build, viaUpdateNow: r.viaUpdateNow };
  }
  return null;
}

/** Names of the levels, for the human detail of a decision (absent: the level is named by its kind only). */
export type LevelNames = Partial<Record<PinLevel, string | null | undefined>>;

const LEVEL_WORDS: Record<PinLevel, string> = { device: 'the device', group: 'device group', site: 'site', org: 'organisation', partner: 'partner' };

function levelText(level: PinLevel, names: LevelNames): string {
  const name = level === 'device' ? null : names[level];
  return name ? `${LEVEL_WORDS[level]} ${name}` : level === 'device' ? LEVEL_WORDS.device : `the ${LEVEL_WORDS[level]}`;
}

/** One sentence saying why (for example "pinned by device group Finance-PCs to 3.1.0"). */
export function decisionDetail(r: ComponentDecision, names: LevelNames = {}): string {
  const pinned = r.pinLevel ? `pinned by ${levelText(r.pinLevel, names)} to ${r.version}` : null;
  switch (r.rule) {
    case 'not_reported':
      return `The device has not reported a ${r.component} version`;
    case 'auto_update_off':
      return 'Automatic updates are off for this device';
    case 'up_to_date':
      return `Up to date with the fleet target ${r.version}`;
    case 'halted':
      return `The rollout of ${r.version} is halted`;
    case 'blocked':
      return `${pinned ? `${cap(pinned)}; the` : 'The'} device failed or rolled back ${r.version}: not offered again until retried (update now)`;
    case 'no_build':
      if (r.version === null) return 'No fleet target for this platform';
      return `${pinned ? `${cap(pinned)}, but there` : 'There'} is no build of ${r.version} for this platform`;
    case 'outside_window':
      return `${pinned ? `${cap(pinned)}; w` : `The fleet target is ${r.version}; w`}aiting for the maintenance window`;
    case 'ring_waiting': {
      const open = r.rings ? ` (${r.rings.open} of ${r.rings.count} rings open)` : '';
      if (r.ring === null) return `The fleet target is ${r.version}; waiting for its rings to finish${open}`;
      return `The fleet target is ${r.version}; waiting for ring ${r.ring}${names.group ? ` (${names.group})` : ''}${open}`;
    }
    case 'rollout':
      if (r.offer !== null && r.ring !== null) return `Fleet target ${r.version} (ring ${r.ring}${names.group ? `, ${names.group}` : ''})`;
      if (r.offer !== null) return r.viaUpdateNow ? `Fleet target ${r.version}, offered by update now` : `Fleet target ${r.version} (rollout at ${r.percent}%)`;
      return `Fleet target ${r.version}: not yet in the rollout's ${r.percent}% of devices`;
    default:
      return r.offer !== null ? cap(pinned ?? '') : `${cap(pinned ?? '')} (installed)`;
  }
}

const cap = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

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
