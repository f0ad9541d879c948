import { sql } from 'drizzle-orm';
import { bigint, boolean, index, integer, jsonb, pgTable, text, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts, updatedAt } from '../../platform/db/columns.js';
import { deviceGroups, organizations, sites } from '../tenancy/schema.js';

/** Installed versions per component, as the agent last reported them. */
export type ComponentVersions = { agent?: string; helper?: string; watchdog?: string };

/** A maintenance window (docs/decisions.md "Agent and update shapes"), in its IANA time zone (none: UTC). */
export interface MaintenanceWindow {
  days: ('mon' | 'tue' | 'wed' | 'thu' | 'fri' | 'sat' | 'sun')[];
  start: string;
  end: string;
  timeZone?: string | undefined;
}

export type PinnedVersions = { agent?: string | undefined; helper?: string | undefined; watchdog?: string | undefined };

/** Organisation enrolment keys: shown once, stored as a SHA-256 hash. */
export const enrollmentKeys = pgTable(
  'enrollment_keys',
  {
    id: idColumn(),
    orgId: uuid('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: varchar('name', { length: 255 }),
    keyHash: varchar('key_hash', { length: 64 }).notNull(),
    siteId: uuid('site_id').references(() => sites.id, { onDelete: 'cascade' }),
    deviceGroupId: uuid('device_group_id').references(() => deviceGroups.id, { onDelete: 'cascade' }),
    expiresAt: ts('expires_at'),
    revokedAt: ts('revoked_at'),
    createdBy: uuid('created_by'),
    createdAt: createdAt(),
  },
  (t) => [uniqueIndex('enrollment_keys_hash_idx').on(t.keyHash), index('enrollment_keys_org_idx').on(t.orgId)],
);

/** Enrolled devices. `status` is stored as last decided; reads derive `offline` from time (service.ts). */
export const devices = pgTable(
  'devices',
  {
    id: idColumn(),
    orgId: uuid('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    siteId: uuid('site_id').references(() => sites.id, { onDelete: 'set null' }),
    deviceGroupId: uuid('device_group_id').references(() => deviceGroups.id, { onDelete: 'set null' }),
    hostname: varchar('hostname', { length: 255 }).notNull(),
    os: varchar('os', { length: 50 }),
    arch: varchar('arch', { length: 50 }),
    status: varchar('status', { length: 20 }).notNull().default('offline'),
    lastSeenAt: ts('last_seen_at'),
    /** SHA-256 of the device token; null once decommissioned. */
    tokenHash: varchar('token_hash', { length: 64 }),
    components: jsonb('components').$type<ComponentVersions>().notNull().default({}),
    autoUpdate: boolean('auto_update').notNull().default(true),
    loggedInUser: varchar('logged_in_user', { length: 255 }),
    /** Set by an update report `started`; cleared when the new version arrives or the update ends. */
    updateStartedAt: ts('update_started_at'),
    updateComponent: varchar('update_component', { length: 20 }),
    updateToVersion: varchar('update_to_version', { length: 64 }),
    /** `POST /devices/update-now`: the next heartbeat offers the current target once. */
    updateNow: boolean('update_now').notNull().default(false),
    enrolledWithKeyId: uuid('enrolled_with_key_id'),
    decommissionedAt: ts('decommissioned_at'),
    /** The signed-in user the last session.login/session.logout events told (subscribers' view). */
    loggedInUserTold: varchar('logged_in_user_told', { length: 255 }),
    /** When those events were emitted: at most one change is told per AGENT_FIELD_EVENT_WINDOW_SECONDS. */
    loggedInUserEventAt: ts('logged_in_user_event_at'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    index('devices_org_idx').on(t.orgId),
    uniqueIndex('devices_token_hash_idx').on(t.tokenHash),
    // The offline sweep's rows. Not on last_seen_at: the heartbeat's batched last-seen write then
    // changes no indexed column, so PostgreSQL updates each row in place (a HOT update, no index
    // writes), with the room the table's fillfactor keeps in every page (migration 0006).
    index('devices_live_idx')
      .on(t.status)
      .where(sql`${t.status} in ('online', 'updating') and ${t.decommissionedAt} is null`),
  ],
);

/** A registered build: (version, component, os, arch) is unique. */
export const agentReleases = pgTable(
  'agent_releases',
  {
    id: idColumn(),
    version: varchar('version', { length: 64 }).notNull(),
    component: varchar('component', { length: 20 }).notNull(),
    os: varchar('os', { length: 50 }).notNull(),
    arch: varchar('arch', { length: 50 }).notNull(),
    /** Remote source: the release host's URL; local source: null (served by Keel). */
    url: text('url'),
    sha256: varchar('sha256', { length: 64 }).notNull(),
    size: bigint('size', { mode: 'number' }).notNull(),
    /** Local source: the file name under DATA_DIR/agent-releases. */
    filePath: text('file_path'),
    source: varchar('source', { length: 10 }).notNull(),
    /** Ed25519 signature (base64) over the build's canonical manifest entry (signing.ts); null: unsigned. */
    signature: text('signature'),
    /** Id of the release key that verified the signature (first 8 hex of SHA-256 of the raw key). */
    keyId: varchar('key_id', { length: 16 }),
    createdAt: createdAt(),
  },
  (t) => [uniqueIndex('agent_releases_build_idx').on(t.version, t.component, t.os, t.arch)],
);

/** The fleet target: one row per (component, os, arch), guaranteed by the unique index. */
export const agentTargets = pgTable(
  'agent_targets',
  {
    id: idColumn(),
    component: varchar('component', { length: 20 }).notNull(),
    os: varchar('os', { length: 50 }).notNull(),
    arch: varchar('arch', { length: 50 }).notNull(),
    version: varchar('version', { length: 64 }).notNull(),
    rolloutPercent: integer('rollout_percent').notNull().default(100),
    /** `active` or `halted` (complete is derived: 100% and active). */
    rolloutStatus: varchar('rollout_status', { length: 20 }).notNull().default('active'),
    promotedAt: ts('promoted_at').notNull().defaultNow(),
    /** Update reports from this instant on count towards the automatic halt (set by promote and resume). */
    reportsSince: ts('reports_since').notNull().defaultNow(),
    updatedAt: updatedAt(),
  },
  (t) => [uniqueIndex('agent_targets_platform_idx').on(t.component, t.os, t.arch)],
);

/**
 * A device's update history: the agents' reports (`POST /agents/update-report`: started, succeeded,
 * failed, rolled_back) and what Keel did (`offered`: the first answer offering the version, again
 * after a retry; `retried`: update-now lifted the device's block on the version).
 */
export const agentUpdateReports = pgTable(
  'agent_update_reports',
  {
    id: idColumn(),
    deviceId: uuid('device_id')
      .notNull()
      .references(() => devices.id, { onDelete: 'cascade' }),
    component: varchar('component', { length: 20 }).notNull(),
    fromVersion: varchar('from_version', { length: 64 }),
    toVersion: varchar('to_version', { length: 64 }).notNull(),
    state: varchar('state', { length: 20 }).notNull(),
    error: text('error'),
    createdAt: createdAt(),
  },
  (t) => [index('agent_update_reports_version_idx').on(t.component, t.toVersion, t.state), index('agent_update_reports_device_idx').on(t.deviceId, t.createdAt)],
);

/**
 * The updates Keel offered a device: one row per (device, component, version), written the first time
 * a heartbeat answers that offer. Only an offered update's report counts towards its rollout, once per
 * device (the row holds the device's last outcome), on the platform it was offered for.
 */
export const agentOffers = pgTable(
  'agent_offers',
  {
    id: idColumn(),
    deviceId: uuid('device_id')
      .notNull()
      .references(() => devices.id, { onDelete: 'cascade' }),
    component: varchar('component', { length: 20 }).notNull(),
    version: varchar('version', { length: 64 }).notNull(),
    os: varchar('os', { length: 50 }).notNull(),
    arch: varchar('arch', { length: 50 }).notNull(),
    offeredAt: ts('offered_at').notNull().defaultNow(),
    /** The device's last outcome report for it: `succeeded`, `failed` or `rolled_back` (null: none yet). */
    outcome: varchar('outcome', { length: 20 }),
    reportedAt: ts('reported_at'),
    /** The device failed or rolled back this version: it is not offered it again until retried (update-now). */
    blocked: boolean('blocked').notNull().default(false),
    /** When update-now lifted the block; cleared by the next offer (which the history records once). */
    retriedAt: ts('retried_at'),
  },
  (t) => [
    uniqueIndex('agent_offers_device_idx').on(t.deviceId, t.component, t.version),
    index('agent_offers_rollout_idx').on(t.component, t.version, t.os, t.arch),
    // The distribution's devices with a blocked version (migration 0025).
    index('agent_offers_blocked_idx').on(t.deviceId).where(sql`${t.blocked}`),
  ],
);

/** Maintenance window and version pins of an organisation or a partner. */
export const agentUpdateSettings = pgTable(
  'agent_update_settings',
  {
    id: idColumn(),
    ownerType: varchar('owner_type', { length: 10 }).notNull(),
    ownerId: uuid('owner_id').notNull(),
    maintenanceWindow: jsonb('maintenance_window').$type<MaintenanceWindow>(),
    pinnedVersions: jsonb('pinned_versions').$type<PinnedVersions>(),
    updatedAt: updatedAt(),
  },
  (t) => [uniqueIndex('agent_update_settings_owner_idx').on(t.ownerType, t.ownerId)],
);

/** One ring of a rollout: its device group, its soak and when it opened (ISO time; null: waiting). */
export interface RingEntry {
  deviceGroupId: string;
  soakMinutes: number;
  openedAt: string | null;
}

/**
 * The rings of a promotion (docs/decisions.md "Agent update rings"), one row per (component, version):
 * ordered device groups offered the version first. `opened` is the number of open rings (1..n), n + 1
 * once the rest of the fleet is open; `haltedRing` the ring whose failures halted the rollout.
 */
export const agentRolloutRings = pgTable(
  'agent_rollout_rings',
  {
    id: idColumn(),
    component: varchar('component', { length: 20 }).notNull(),
    version: varchar('version', { length: 64 }).notNull(),
    rings: jsonb('rings').$type<RingEntry[]>().notNull(),
    opened: integer('opened').notNull().default(1),
    haltedRing: integer('halted_ring'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [uniqueIndex('agent_rollout_rings_idx').on(t.component, t.version)],
);

/**
 * Live devices per everything the distribution's decision reads (migration 0025, docs/decisions.md
 * "Agent distribution at scale"): kept by triggers on `devices` as delta rows (`n` +1 / -1, `folded`
 * false), folded into one row per key by the `agents.version-counts-rollup` job. Readers sum `n` per key.
 */
export const deviceVersionCounts = pgTable(
  'device_version_counts',
  {
    orgId: uuid('org_id').notNull(),
    siteId: uuid('site_id'),
    deviceGroupId: uuid('device_group_id'),
    os: varchar('os', { length: 50 }),
    arch: varchar('arch', { length: 50 }),
    autoUpdate: boolean('auto_update').notNull(),
    status: varchar('status', { length: 20 }).notNull(),
    agent: text('agent'),
    helper: text('helper'),
    watchdog: text('watchdog'),
    n: integer('n').notNull(),
    folded: boolean('folded').notNull().default(false),
  },
  (t) => [index('device_version_counts_org_idx').on(t.orgId), index('device_version_counts_unfolded_idx').on(t.orgId).where(sql`not ${t.folded}`)],
);
