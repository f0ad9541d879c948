import { loggableError } from '../../platform/safe-error.js';
import { and, eq, inArray, isNotNull } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { clock } from '../../platform/clock.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import { InvalidatedCache } from '../../platform/cache.js';
import { organizations } from '../tenancy/schema.js';
import { agentReleases, agentRolloutRings, agentTargets, agentUpdateSettings, devices, type ComponentVersions, type MaintenanceWindow, type PinnedVersions } from './schema.js';
import { COMPONENTS, type BuildInfo, type Component, type PinChain, type TargetInfo } from './decision.js';
import { releaseKeysOf } from './release-keys.js';

/**
 * What the heartbeat needs, held in memory per process (docs/decisions.md "Caches"): devices by token hash,
 * the fleet targets, builds and update settings. Every write elsewhere publishes on one of two
 * invalidation topics, which every process applies at once (Redis pub/sub or LISTEN/NOTIFY):
 * `agents.device` (key: a device id, or `*`) and `agents.config` (targets, builds, settings: `*`).
 * A load that raced with an invalidation is not stored (generation check, as access/role-cache.ts).
 *
 * Last-seen stamps are not written per heartbeat: they are buffered and flushed once a second in one
 * statement (`flushLastSeen`, run by the `agents.last-seen-flush` job of context.ts), so a heartbeat
 * that changes nothing costs no statement at all.
 */

export const DEVICE_TOPIC = 'agents.device';
export const CONFIG_TOPIC = 'agents.config';
/** Devices kept per process (about 0.5 KB each); past it the oldest entry is dropped and read again when needed. */
const DEVICE_CACHE_MAX = 500_000;

export interface DeviceState {
  id: string;
  orgId: string;
  partnerId: string | null;
  siteId: string | null;
  deviceGroupId: string | null;
  hostname: string;
  os: string | null;
  arch: string | null;
  status: string;
  components: ComponentVersions;
  autoUpdate: boolean;
  loggedInUser: string | null;
  updateNow: boolean;
  updateStartedAt: number | null;
  updateComponent: string | null;
  updateToVersion: string | null;
  lastSeenMs: number | null;
  /** Its last-seen stamp waits for the next flush (it is in the flush queue once). */
  seenQueued: boolean;
  /** The signed-in user the last session events told, and when (ms): a pending change is told once the window has passed. */
  userTold: string | null;
  userEventMs: number | null;
  /** The last offer recorded for it (`component@version`): the heartbeat writes an offer once, not per heartbeat. */
  offered: string | null;
  /**
   * The updates (`component@version`) this device failed or rolled back and nobody retried yet: never
   * offered again until a retry (docs/decisions.md "Honest rollouts"). Loaded with the device, so the
   * rule costs an unchanged heartbeat nothing; a report or a retry drops the cached state.
   */
  blocked: ReadonlySet<string>;
}

export interface UpdateSettings {
  maintenanceWindow: MaintenanceWindow | null;
  pinnedVersions: PinnedVersions | null;
}

/** The columns of a device's cached state (`stateOf`), for one token hash or, to revalidate the cache, many ids. */
const DEVICE_COLUMNS = `d.id, d.token_hash, d.org_id, o.partner_id, d.site_id, d.device_group_id, d.hostname, d.os, d.arch, d.status, d.components,
     d.auto_update, d.logged_in_user, d.update_now, d.update_started_at, d.update_component, d.update_to_version, d.last_seen_at,
     d.logged_in_user_told, d.logged_in_user_event_at,
     (select coalesce(jsonb_agg(b.component || '@' || b.version), '[]'::jsonb) from agent_offers b where b.device_id = d.id and b.blocked) as blocked`;

const deviceByHash = prepared(
  'agents_device_by_hash',
  `select ${DEVICE_COLUMNS}
   from devices d join organizations o on o.id = d.org_id where d.token_hash = $1 and d.decommissioned_at is null`,
);

const devicesByIds = prepared(
  'agents_devices_by_ids',
  `select ${DEVICE_COLUMNS}
   from devices d join organizations o on o.id = d.org_id where d.id = any($1::uuid[]) and d.decommissioned_at is null`,
);

/** Devices read back per statement when the cache is revalidated (`revalidateDevices`). */
const REVALIDATE_CHUNK = 2_000;

/**
 * The batched last-seen write. It sets no indexed column of devices (migration 0006), so each row is
 * updated in place (HOT); test/agents/heartbeat-cost.test.ts checks that against the database.
 * The stamps go as epoch milliseconds (float8[]), not timestamptz text: parsing 10,000 ISO strings
 * was most of the statement's cost on PGlite (57-85 ms per 10,000 rows, 28 ms as numbers).
 */
export const flushStatement = prepared(
  'agents_flush_last_seen',
  `update devices d set last_seen_at = v.ts
   from (select id, to_timestamp(ms / 1000.0) as ts from unnest($1::uuid[], $2::float8[]) as u(id, ms)) v
   where d.id = v.id and (d.last_seen_at is null or d.last_seen_at < v.ts)`,
);

const ms = (v: unknown): number | null => (v === null || v === undefined ? null : new Date(v as string).getTime());

export class AgentState {
  readonly #byHash = new Map<string, DeviceState>();
  readonly #hashOf = new Map<string, string>();
  #deviceGeneration = 0;
  /**
   * The configuration a decision reads (all dropped together by `agents.config`): `targets`, the builds
   * of a platform (`builds:<os>/<arch>`), update settings (`settings:<org|partner>:<id>`) and the
   * placement pins (`pins`). Misses in flight share one load, so a drop costs one statement per entry
   * however many heartbeats arrive meanwhile.
   */
  readonly #config = new InvalidatedCache<unknown>();
  /** Devices whose last-seen stamp waits for the next flush (a flag on the state, not a map write per heartbeat). */
  #seenQueue: DeviceState[] = [];
  /** A queued device's state was dropped from the cache: the queue may hold two states of one device. */
  #seenQueueMayRepeat = false;
  #flushing: Promise<void> | null = null;

  constructor(
    private readonly keel: Keel,
    private readonly publicBase: () => string,
  ) {
    keel.invalidation.on(DEVICE_TOPIC, (key) => this.dropDevice(key));
    keel.invalidation.on(CONFIG_TOPIC, () => this.dropConfig());
    keel.invalidation.onResync(async () => {
      this.dropConfig();
      await this.revalidateDevices();
    });
  }

  get db(): Db {
    return this.keel.db;
  }

  /** The device of a token hash (cached), or null (unknown or decommissioned). */
  async device(tokenHash: string): Promise<DeviceState | null> {
    const hit = this.#byHash.get(tokenHash);
    if (hit) return hit;
    const generation = this.#deviceGeneration;
    const [r] = await rawQuery(this.db, deviceByHash, [tokenHash]);
    if (!r) return null;
    const state = stateOf(r);
    if (generation === this.#deviceGeneration) this.remember(tokenHash, state);
    return state;
  }

  /** Stores a device state (a load, or what this process just wrote); the oldest entry goes past the cap. */
  remember(tokenHash: string, state: DeviceState): void {
    if (this.#byHash.size >= DEVICE_CACHE_MAX && !this.#byHash.has(tokenHash)) {
      const oldest = this.#byHash.entries().next().value;
      if (oldest) {
        this.#byHash.delete(oldest[0]);
        this.#hashOf.delete(oldest[1].id);
      }
    }
    this.#byHash.set(tokenHash, state);
    this.#hashOf.set(state.id, tokenHash);
  }

  dropDevice(id: string): void {
    this.#deviceGeneration++;
    if (this.#seenQueue.length > 0) this.#seenQueueMayRepeat = true;
    if (id === '*') {
      this.#byHash.clear();
      this.#hashOf.clear();
      return;
    }
    const hash = this.#hashOf.get(id);
    if (hash !== undefined) this.#byHash.delete(hash);
    this.#hashOf.delete(id);
  }

  /**
   * The cache's second line (a message missed, a writer that died before announcing its change; run by
   * the invalidation bus every CACHE_MAX_STALENESS_SECONDS and after a reconnect): every cached device
   * is read back, REVALIDATE_CHUNK per statement, and dropped only where the row differs from what is
   * cached (changed, decommissioned, another token), so it is read again at its next heartbeat. It used
   * to drop every device, and each was then read back alone by its next heartbeat: 10,000 statements
   * every 30 s at 10,000 devices. A state changed here while its chunk was being read differs and is
   * dropped too (read again: never kept stale). Should the statement fail, everything is dropped.
   */
  async revalidateDevices(): Promise<void> {
    const cached = [...this.#byHash];
    try {
      for (let i = 0; i < cached.length; i += REVALIDATE_CHUNK) {
        const chunk = cached.slice(i, i + REVALIDATE_CHUNK);
        const rows = await rawQuery(this.db, devicesByIds, [chunk.map(([, d]) => d.id)]);
        const current = new Map(rows.map((r) => [r.id as string, r]));
        for (const [hash, d] of chunk) {
          const r = current.get(d.id);
          if (r && r.token_hash === hash && sameState(stateOf(r), d)) continue;
          if (this.#byHash.get(hash) === d) this.dropDevice(d.id);
        }
      }
    } catch (err) {
      this.keel.log.warn({ error: loggableError(err) }, 'agents: device cache revalidation failed; every device is read again');
      this.dropDevice('*');
    }
  }

  dropConfig(): void {
    this.#config.drop('*');
  }

  /** `key`'s cached configuration, else `load()`'s (the cached value is read first: the hot path allocates nothing). */
  async #configured<T>(key: string, load: () => Promise<T>): Promise<T> {
    const hit = this.#config.peek(key);
    return (hit !== undefined ? hit : await this.#config.get(key, load)) as T;
  }

  /** Every fleet target, keyed `component/os/arch`, with the rings of its promotion (agents.config drops them). */
  targets(): Promise<Map<string, TargetInfo>> {
    return this.#configured('targets', async () => {
      // One statement: the targets with their promotion's rings.
      const rows = await this.db
        .select({ t: agentTargets, rings: agentRolloutRings.rings, opened: agentRolloutRings.opened })
        .from(agentTargets)
        .leftJoin(agentRolloutRings, and(eq(agentRolloutRings.component, agentTargets.component), eq(agentRolloutRings.version, agentTargets.version)));
      const map = new Map<string, TargetInfo>();
      for (const { t: r, rings, opened } of rows) {
        map.set(`${r.component}/${r.os}/${r.arch}`, {
          version: r.version, rolloutPercent: r.rolloutPercent, rolloutStatus: r.rolloutStatus === 'halted' ? 'halted' : 'active',
          rings: rings && opened !== null ? { groups: rings.map((g) => g.deviceGroupId), open: opened } : undefined,
        });
      }
      return map;
    });
  }

  /**
   * The builds a decision may need for this platform (every release of the platform), loaded once and
   * cached. A load that raced with an invalidation is not cached, but its caller still decides with
   * what it read (as `targets()` does): it used to find an empty cache and offer nothing.
   */
  async builds(os: string, arch: string): Promise<(version: string, component: Component) => BuildInfo | undefined> {
    const loaded = await this.#configured(`builds:${os}/${arch}`, async () => {
      const rows = await this.db
        .select()
        .from(agentReleases)
        .where(and(eq(agentReleases.os, os), eq(agentReleases.arch, arch)));
      const map = new Map<string, BuildInfo>();
      // With release keys configured only builds signed by one of them are offered: an unsigned build
      // registered before the keys, or one signed by a key since retired, is left out (agents would refuse it).
      const { keys } = releaseKeysOf(this.keel.config);
      const trusted = new Set(keys.map((k) => k.id));
      for (const r of rows) {
        if (keys.length > 0 && (r.keyId === null || !trusted.has(r.keyId))) continue;
        const url = r.url ?? `${this.publicBase()}/api/v1/agent-versions/${encodeURIComponent(r.version)}/download/${r.component}/${encodeURIComponent(r.os)}/${encodeURIComponent(r.arch)}`;
        map.set(`${r.version}/${r.component}`, { url, sha256: r.sha256, size: r.size, signature: r.signature ?? null, keyId: r.keyId ?? null });
      }
      return map;
    });
    return (version, component) => loaded.get(`${version}/${component}`);
  }

  /** Update settings of `org:<id>` or `partner:<id>` (null: none set). */
  settings(ownerType: 'org' | 'partner', ownerId: string): Promise<UpdateSettings | null> {
    return this.#configured(`settings:${ownerType}:${ownerId}`, async () => {
      const [row] = await this.db
        .select()
        .from(agentUpdateSettings)
        .where(and(eq(agentUpdateSettings.ownerType, ownerType), eq(agentUpdateSettings.ownerId, ownerId)));
      return row ? { maintenanceWindow: row.maintenanceWindow ?? null, pinnedVersions: row.pinnedVersions ?? null } : null;
    });
  }

  /**
   * The pins set on devices, device groups and sites (`device:<id>`, `group:<id>`, `site:<id>`), every
   * one in one statement per configuration generation: a device's first heartbeat after a change costs
   * this one read, not one per level, and an unchanged heartbeat none.
   */
  placementPins(): Promise<Map<string, PinnedVersions>> {
    return this.#configured('pins', async () => {
      const rows = await this.db
        .select({ ownerType: agentUpdateSettings.ownerType, ownerId: agentUpdateSettings.ownerId, pins: agentUpdateSettings.pinnedVersions })
        .from(agentUpdateSettings)
        .where(and(inArray(agentUpdateSettings.ownerType, ['device', 'group', 'site']), isNotNull(agentUpdateSettings.pinnedVersions)));
      const map = new Map<string, PinnedVersions>();
      for (const r of rows) if (r.pins) map.set(`${r.ownerType}:${r.ownerId}`, r.pins);
      return map;
    });
  }

  /** What a device's decision needs beyond itself: the pins of each level and the effective window (organisation over partner). */
  async policy(d: { id: string; orgId: string; partnerId: string | null; siteId: string | null; deviceGroupId: string | null }): Promise<{ pins: PinChain; window: MaintenanceWindow | null }> {
    const org = await this.settings('org', d.orgId);
    const partner = d.partnerId ? await this.settings('partner', d.partnerId) : null;
    const lower = await this.placementPins();
    return {
      pins: {
        device: lower.get(`device:${d.id}`),
        group: d.deviceGroupId ? lower.get(`group:${d.deviceGroupId}`) : undefined,
        site: d.siteId ? lower.get(`site:${d.siteId}`) : undefined,
        org: org?.pinnedVersions,
        partner: partner?.pinnedVersions,
      },
      window: org?.maintenanceWindow ?? partner?.maintenanceWindow ?? null,
    };
  }

  /** Records a heartbeat's time, written by the next flush. */
  seen(d: DeviceState, atMs: number): void {
    d.lastSeenMs = atMs;
    if (d.seenQueued) return;
    d.seenQueued = true;
    this.#seenQueue.push(d);
  }

  /** Writes the buffered last-seen stamps in one statement. */
  async flushLastSeen(): Promise<void> {
    while (this.#flushing) await this.#flushing;
    if (this.#seenQueue.length === 0) return;
    const queue = this.#seenQueue;
    const mayRepeat = this.#seenQueueMayRepeat;
    this.#seenQueue = [];
    this.#seenQueueMayRepeat = false;
    const ids: string[] = [];
    const stamps: number[] = [];
    for (const d of queue) {
      d.seenQueued = false;
      ids.push(d.id);
      stamps.push(d.lastSeenMs ?? 0);
    }
    // Two states of one device (one dropped from the cache, one loaded since): one row, the later stamp.
    if (mayRepeat) dedupeLatest(ids, stamps);
    this.#flushing = rawQuery(this.db, flushStatement, [ids, stamps]).then(
      () => undefined,
      (err: unknown) => this.keel.log.warn({ error: loggableError(err) }, 'agents: last-seen flush failed'),
    );
    try {
      await this.#flushing;
    } finally {
      this.#flushing = null;
    }
  }
}

/** Keeps one entry per id (the latest stamp), in place. */
function dedupeLatest(ids: string[], stamps: number[]): void {
  const latest = new Map<string, number>();
  ids.forEach((id, i) => latest.set(id, Math.max(latest.get(id) ?? 0, stamps[i] ?? 0)));
  ids.length = 0;
  stamps.length = 0;
  for (const [id, at] of latest) {
    ids.push(id);
    stamps.push(at);
  }
}

/** Organisation of a device for settings: used by services that start from a device id. */
export async function partnerOfOrg(db: Db, orgId: string): Promise<string | null> {
  const [o] = await db.select({ partnerId: organizations.partnerId }).from(organizations).where(eq(organizations.id, orgId));
  return o?.partnerId ?? null;
}

export const liveDevice = () => isNotNull(devices.tokenHash);

/** `now` in ms (the controllable clock). */
export const nowMs = () => clock.nowMs();

/** A device's cached state from its row (`DEVICE_COLUMNS`). */
function stateOf(r: Record<string, unknown>): DeviceState {
  return {
    id: r.id as string,
    orgId: r.org_id as string,
    partnerId: (r.partner_id as string | null) ?? null,
    siteId: (r.site_id as string | null) ?? null,
    deviceGroupId: (r.device_group_id as string | null) ?? null,
    hostname: r.hostname as string,
    os: (r.os as string | null) ?? null,
    arch: (r.arch as string | null) ?? null,
    status: r.status as string,
    components: (typeof r.components === 'string' ? JSON.parse(r.components) : r.components) as ComponentVersions,
    autoUpdate: Boolean(r.auto_update),
    loggedInUser: (r.logged_in_user as string | null) ?? null,
    updateNow: Boolean(r.update_now),
    updateStartedAt: ms(r.update_started_at),
    updateComponent: (r.update_component as string | null) ?? null,
    updateToVersion: (r.update_to_version as string | null) ?? null,
    lastSeenMs: ms(r.last_seen_at),
    seenQueued: false,
    userTold: (r.logged_in_user_told as string | null) ?? null,
    userEventMs: ms(r.logged_in_user_event_at),
    offered: null,
    blocked: new Set((typeof r.blocked === 'string' ? JSON.parse(r.blocked) : (r.blocked ?? [])) as string[]),
  };
}

/**
 * Whether a cached state still says what its row says, field by field (every field a heartbeat
 * decides with). Not compared: the last-seen stamp (this process's own is newer than the row's until
 * the flush), the flush flag and `offered` (this process's own memory of its offers).
 */
function sameState(row: DeviceState, cached: DeviceState): boolean {
  return (
    row.orgId === cached.orgId && row.partnerId === cached.partnerId && row.siteId === cached.siteId && row.deviceGroupId === cached.deviceGroupId &&
    row.hostname === cached.hostname && row.os === cached.os && row.arch === cached.arch && row.status === cached.status &&
    COMPONENTS.every((c) => row.components[c] === cached.components[c]) &&
    row.autoUpdate === cached.autoUpdate && row.loggedInUser === cached.loggedInUser && row.updateNow === cached.updateNow &&
    row.updateStartedAt === cached.updateStartedAt && row.updateComponent === cached.updateComponent && row.updateToVersion === cached.updateToVersion &&
    row.userTold === cached.userTold && row.userEventMs === cached.userEventMs &&
    row.blocked.size === cached.blocked.size && [...row.blocked].every((b) => cached.blocked.has(b))
  );
}
