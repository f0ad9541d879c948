import { z } from '@hono/zod-openapi';
import { COMPONENTS, DAYS, DECISION_RULES, knownTimeZone, minutesOf } from './decision.js';
import { BEHIND_REASONS } from './distribution.js';

/** Request and response schemas of the agents module (every field described, every body with an example). */

const d = (description: string, example?: unknown) => (example === undefined ? { description } : { description, example });

export const Version = z.string().trim().min(1).max(64).regex(/^[0-9A-Za-z][0-9A-Za-z.+-]*$/, 'must be a version such as 1.4.2 or 1.5.0-rc.1');
export const Platform = z.string().trim().min(1).max(50).regex(/^[a-z0-9_]+$/, 'must be lower-case letters, digits or _');
export const ComponentName = z.enum(COMPONENTS).openapi(d('Agent component', 'agent'));

export const Components = z
  .object({
    agent: Version.openapi(d('Installed agent version', '1.4.2')),
    helper: Version.optional().openapi(d('Installed helper version', '1.4.2')),
    watchdog: Version.optional().openapi(d('Installed watchdog version', '1.4.2')),
  })
  .openapi('AgentComponents', { description: 'The versions of the agent\'s components installed on the device' });

export const ComponentsOut = z
  .object({
    agent: z.string().optional().openapi(d('Installed agent version')),
    helper: z.string().optional().openapi(d('Installed helper version')),
    watchdog: z.string().optional().openapi(d('Installed watchdog version')),
  })
  .openapi('InstalledVersions', { description: 'The component versions the device last reported' });

export const Device = z
  .object({
    id: z.uuid().openapi(d('Device id')),
    orgId: z.uuid().openapi(d('Organisation of the device')),
    siteId: z.uuid().nullable().openapi(d('Site of the device')),
    deviceGroupId: z.uuid().nullable().openapi(d('Device group of the device')),
    hostname: z.string().openapi(d('Host name reported by the agent')),
    os: z.string().nullable().openapi(d('Operating system (linux, windows, darwin)')),
    arch: z.string().nullable().openapi(d('CPU architecture (amd64, arm64)')),
    components: ComponentsOut,
    status: z.enum(['online', 'offline', 'updating']).openapi(d('online; offline (no heartbeat for three intervals, or updating for more than 5 minutes); updating')),
    lastSeenAt: z.string().nullable().openapi(d('Last heartbeat (ISO 8601)')),
    autoUpdate: z.boolean().openapi(d('Whether the device takes updates (stored by Keel, sent in every heartbeat answer)')),
    loggedInUser: z.string().nullable().openapi(d('User logged in on the device, as last reported')),
    updateNowPending: z.boolean().openapi(d('An update-now request waits for the next heartbeat')),
    createdAt: z.string().openapi(d('Enrolment time')),
  })
  .openapi('Device');

export const EnrollmentKeyCreate = z
  .object({
    name: z.string().trim().min(1).max(255).optional().openapi(d('Label of the key')),
    siteId: z.uuid().nullable().optional().openapi(d('Site devices enrolled with this key join')),
    deviceGroupId: z.uuid().nullable().optional().openapi(d('Device group devices enrolled with this key join')),
    expiresAt: z.iso.datetime({ offset: true }).nullable().optional().openapi(d('Expiry (ISO 8601); none: never')),
  })
  .openapi('EnrollmentKeyCreate', { example: { name: 'Head office', expiresAt: '2030-01-01T00:00:00Z' } });

const keyFields = {
  id: z.uuid().openapi(d('Key id')),
  name: z.string().nullable().openapi(d('Label')),
  siteId: z.uuid().nullable().openapi(d('Site of enrolled devices')),
  deviceGroupId: z.uuid().nullable().openapi(d('Device group of enrolled devices')),
  expiresAt: z.string().nullable().openapi(d('Expiry')),
  revokedAt: z.string().nullable().openapi(d('When the key was revoked')),
  createdAt: z.string().openapi(d('Creation time')),
};
export const EnrollmentKey = z.object(keyFields).openapi('EnrollmentKey');
export const EnrollmentKeyCreated = z
  .object({
    ...keyFields,
    key: z.string().openapi(d('The key (shown once; stored only as a hash)')),
    serverUrl: z.string().nullable().openapi(d('The URL agents enrol with (`KEEL_URL`): the configured PUBLIC_URL; null when none is configured (the console then uses its own origin)', 'https://keel.example.com')),
  })
  .openapi('EnrollmentKeyCreated');

export const EnrollBody = z
  .object({
    enrollmentKey: z.string().min(1).max(200).openapi(d('Organisation enrolment key')),
    hostname: z.string().trim().min(1).max(255).openapi(d('Host name')),
    os: Platform.openapi(d('Operating system', 'linux')),
    arch: Platform.openapi(d('CPU architecture', 'amd64')),
    agentVersion: Version.openapi(d('Installed agent version', '1.4.2')),
    siteId: z.uuid().optional().openapi(d('Site (when the key names none)')),
    deviceGroupId: z.uuid().optional().openapi(d('Device group (when the key names none)')),
  })
  .openapi('EnrollRequest', { example: { enrollmentKey: 'ke_…', hostname: 'ws-042', os: 'linux', arch: 'amd64', agentVersion: '1.4.2' } });

export const Enrolled = z
  .object({
    deviceId: z.uuid().openapi(d('Device id')),
    deviceToken: z.string().openapi(d('Device token for heartbeats and reports (shown once; stored only as a hash)')),
    heartbeatIntervalSeconds: z.number().int().openapi(d('Heartbeat interval')),
    releaseKeys: z.array(z.string()).openapi(d('Release keys the agent pins (base64 of the raw 32-byte Ed25519 keys); [] when Keel has none (development only)')),
  })
  .openapi('Enrolled');

export const HeartbeatBody = z
  .object({
    components: Components,
    hostname: z.string().trim().min(1).max(255).optional().openapi(d('Host name, if it changed')),
    loggedInUser: z.string().max(255).nullable().optional().openapi(d('User logged in on the device; null: nobody')),
  })
  .openapi('Heartbeat', { example: { components: { agent: '1.4.2', watchdog: '1.4.2' }, loggedInUser: 'alice' } });

export const UpdateOffer = z
  .object({
    component: ComponentName,
    version: z.string().openapi(d('Version to install')),
    url: z.string().openapi(d('Download URL')),
    sha256: z.string().openapi(d('SHA-256 of the binary (hex)')),
    size: z.number().int().openapi(d('Size in bytes')),
    signature: z.string().nullable().openapi(d('Ed25519 signature (base64) over the canonical manifest entry {"arch","component","os","sha256","size","version"}; null: unsigned (development only). The agent verifies it with its pinned keys before running the binary')),
    keyId: z.string().nullable().openapi(d('Id of the release key that signed the build (first 8 hex of SHA-256 of the raw key), or null')),
  })
  .openapi('UpdateOffer');

export const HeartbeatAnswer = z
  .object({
    nextHeartbeatSeconds: z.number().int().openapi(d('Seconds until the next heartbeat')),
    autoUpdate: z.boolean().openapi(d('Whether this device takes updates')),
    update: UpdateOffer.nullable().openapi(d('The update to apply now, or null')),
    releaseKeys: z
      .object({
        keys: z.array(z.string()).openapi(d('Release keys (base64 of the raw 32-byte Ed25519 keys), sorted')),
        signature: z.string().openapi(d('Ed25519 signature (base64), by a key the agent already trusts, over the UTF-8 of {"keys":[...]} (this list, no spaces)')),
      })
      .nullable()
      .openapi(d('Two-phase release-key rotation (AGENT_RELEASE_KEYS_SIGNATURE): the new key list to pin once its signature verifies; null: no rotation')),
  })
  .openapi('HeartbeatAnswer');

export const UpdateReportBody = z
  .object({
    component: ComponentName,
    fromVersion: Version.nullable().optional().openapi(d('Version before the update', '1.4.2')),
    toVersion: Version.openapi(d('Version the update goes to', '1.5.0')),
    state: z.enum(['started', 'succeeded', 'failed', 'rolled_back']).openapi(d('Stage reached', 'started')),
    error: z.string().max(2000).nullable().optional().openapi(d('What went wrong (failed, rolled_back)')),
  })
  .openapi('UpdateReport', { example: { component: 'agent', fromVersion: '1.4.2', toVersion: '1.5.0', state: 'started' } });

export const AutoUpdateBody = z
  .object({ enabled: z.boolean().openapi(d('Take updates', false)) })
  .openapi('AutoUpdate', { example: { enabled: false } });

export const UpdateNowBody = z
  .object({ deviceIds: z.array(z.uuid()).min(1).max(1000).openapi(d('Devices to offer the current target at their next heartbeat')) })
  .openapi('UpdateNow', { example: { deviceIds: ['0190a6f4-1c2d-7e3f-8a9b-0c1d2e3f4a5b'] } });

export const UpdateHistoryEntry = z
  .object({
    id: z.uuid().openapi(d('Entry id')),
    component: ComponentName,
    fromVersion: z.string().nullable().openapi(d('Version installed before (as reported or as Keel knew it), or null')),
    toVersion: z.string().openapi(d('Version offered or updated to')),
    state: z
      .enum(['offered', 'started', 'succeeded', 'failed', 'rolled_back', 'retried'])
      .openapi(d('offered (Keel offered the version: the first time, and again after a retry); started, succeeded, failed, rolled_back (reported by the agent); retried (update-now lifted the block a failure or rollback put on the version)')),
    error: z.string().nullable().openapi(d("The agent's reason (failed, rolled_back), cut to 500 characters")),
    at: z.string().openapi(d('When (ISO 8601)')),
  })
  .openapi('UpdateHistoryEntry');

export const UpdateNowAnswer = z
  .object({ deviceIds: z.array(z.uuid()).openapi(d('Devices that will be offered the update')) })
  .openapi('UpdateNowAccepted');

const Hhmm = z.string().refine((v) => minutesOf(v) !== null, 'must be HH:MM (00:00-23:59)');
export const MaintenanceWindow = z
  .object({
    days: z.array(z.enum(DAYS)).min(1).max(7).refine((a) => new Set(a).size === a.length, 'must not repeat a day').openapi(d('Days the window starts on (in its time zone)', ['sat', 'sun'])),
    start: Hhmm.openapi(d('Start, HH:MM on the wall clock of timeZone', '22:00')),
    end: Hhmm.openapi(d('End, HH:MM on the wall clock of timeZone; at or before start: the window crosses midnight and belongs to its start day', '02:00')),
    timeZone: z
      .string()
      .max(64)
      .refine(knownTimeZone, 'must be an IANA time zone name, such as Europe/London')
      .optional()
      .openapi(d('IANA time zone the days and times are read in (default UTC); daylight saving follows the zone', 'Europe/London')),
  })
  .openapi('MaintenanceWindow');

export const PinnedVersions = z
  .object({
    agent: Version.optional().openapi(d('Pinned agent version', '1.4.2')),
    helper: Version.optional().openapi(d('Pinned helper version')),
    watchdog: Version.optional().openapi(d('Pinned watchdog version')),
  })
  .openapi('PinnedVersions');

export const SettingsBody = z
  .object({
    maintenanceWindow: MaintenanceWindow.nullable().optional().openapi(d('Window for updates; null clears it (any time, or the partner window)')),
    pinnedVersions: PinnedVersions.nullable().optional().openapi(d('Versions to stay on; null clears them')),
  })
  .openapi('AgentUpdateSettingsUpdate', { example: { maintenanceWindow: { days: ['fri'], start: '22:00', end: '02:00' }, pinnedVersions: { agent: '1.4.2' } } });

export const SettingsOut = z
  .object({
    maintenanceWindow: MaintenanceWindow.nullable().openapi(d('Window for updates (UTC), or null')),
    pinnedVersions: PinnedVersions.nullable().openapi(d('Pinned versions, or null')),
  })
  .openapi('AgentUpdateSettings');

export const PinsBody = z
  .object({ pinnedVersions: PinnedVersions.nullable().optional().openapi(d('Versions to stay on, per component; null (or {}) clears them')) })
  .openapi('AgentPinsUpdate', { example: { pinnedVersions: { agent: '3.1.0' } } });

export const PinsOut = z
  .object({ pinnedVersions: PinnedVersions.nullable().openapi(d('Pinned versions of this level, or null')) })
  .openapi('AgentPins');

export const DecisionEntry = z
  .object({
    component: z.enum(COMPONENTS).openapi(d('The component decided for')),
    offer: z.string().nullable().openapi(d('The version the next heartbeat would offer, or null')),
    rule: z.enum(DECISION_RULES).openapi(d('The rule that decided (docs/decisions.md "Agent pins and distribution")')),
    detail: z.string().openapi(d('Why, in a sentence', 'Pinned by device group Finance-PCs to 3.1.0')),
  })
  .openapi('UpdateDecisionEntry');

export const DecisionOut = z.object({ data: z.array(DecisionEntry).openapi(d('One entry per component')) }).openapi('UpdateDecision');

export const DistributionOut = z
  .object({
    versions: z
      .array(
        z.object({
          component: z.enum(COMPONENTS).openapi(d('The component')),
          version: z.string().openapi(d('The version devices report', '3.1.0')),
          devices: z.number().int().openapi(d('How many devices run it')),
        }),
      )
      .openapi(d('Devices per component version')),
    behind: z
      .array(
        z.object({
          reason: z.enum(BEHIND_REASONS).openapi(d('Why these devices are behind (docs/decisions.md "Agent pins and distribution")')),
          devices: z.number().int().openapi(d('How many devices are behind for this reason')),
        }),
      )
      .openapi(d('Devices behind the fleet target of their platform, per reason (each device once)')),
  })
  .openapi('AgentVersionDistribution');
