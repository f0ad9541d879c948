import { mkdirSync, renameSync, writeFileSync, existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { and, eq, isNull, sql, type SQL } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { randomToken, sha256Hex } from '../../platform/crypto.js';
import { rowsOf } from '../../platform/db/client.js';
import { transaction } from '../../platform/db/transaction.js';
import { AppError, notFound, platformError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { placementFilter, visibleOrgCondition, type AccessContext } from '../access/scope.js';
import { agentOffers, agentReleases, agentTargets, devices } from './schema.js';
import { compareVersions, COMPONENTS, isPrerelease, type Component } from './decision.js';
import { CONFIG_TOPIC } from './state.js';
import { reportCounts } from './heartbeat.js';
import { releaseKeysOf } from './release-keys.js';
import { releaseRefusal } from './release-writer.js';
import { verifyBuildSignature } from './signing.js';
import type { Principal } from '../identity/principal.js';
import { agentsError } from './errors.js';
import { checkRingGroups, PROMOTE_LOCK, replaceRings, resumeRings, ringsView, type RingInput, type RingView } from './rings.js';

type ReleaseRow = typeof agentReleases.$inferSelect;

export const releaseDir = (keel: Keel) => join(resolve(keel.config.DATA_DIR), 'agent-releases');
export const platformName = (r: { component: string; os: string; arch: string }) => `${r.component}:${r.os}/${r.arch}`;

export interface BuildInput {
  version: string;
  component: Component;
  os: string;
  arch: string;
  url: string | null;
  sha256: string;
  size: number;
  filePath: string | null;
  /** Release signature (base64) as sent; verified by registerBuilds. */
  signature?: string | null | undefined;
}

export const signatureInvalid = (detail: string, platform: string) =>
  agentsError('release_signature_invalid', { message: `The release signature of ${platform} ${detail}`, details: { platform } });

/**
 * The release-signature rule (docs/decisions.md): with release keys configured every build must carry
 * a signature, by one of them, over its canonical manifest entry (signing.ts); a refusal is audited
 * as a failure and nothing is written. Without keys (development only) builds are accepted as sent.
 * Answers each build with the id of the key that verified it (null: unsigned or no keys).
 */
export async function verifyBuilds(keel: Keel, builds: BuildInput[], info: AuditRequestInfo, action: string): Promise<(BuildInput & { keyId: string | null })[]> {
  const { keys } = releaseKeysOf(keel.config);
  const out: (BuildInput & { keyId: string | null })[] = [];
  for (const b of builds) {
    const signature = b.signature?.trim() || null;
    if (keys.length === 0) {
      out.push({ ...b, signature, keyId: null });
      continue;
    }
    const key = signature ? verifyBuildSignature(keys, b, signature) : null;
    if (!key) {
      const reason = signature ? 'signature does not verify' : 'unsigned';
      await writeAudit(keel.db, info, { action, result: 'failure', target: { type: 'agent_version', id: b.version }, details: { reason: 'release_signature_invalid', detail: reason, platform: platformName(b) } });
      throw signatureInvalid(signature ? 'does not verify with any of AGENT_RELEASE_PUBLIC_KEYS' : 'is missing: with release keys configured every build must be signed', platformName(b));
    }
    out.push({ ...b, signature, keyId: key.id });
  }
  return out;
}

/** Registers builds (one transaction); an existing identical build is kept, a different one is a 409. */
export async function registerBuilds(keel: Keel, input: BuildInput[], info: AuditRequestInfo, action: string): Promise<ReleaseRow[]> {
  const builds = await verifyBuilds(keel, input, info, action);
  const rows = await transaction(keel.db, async (tx) => {
    const out: ReleaseRow[] = [];
    for (const b of builds) {
      const [existing] = await tx.db
        .select()
        .from(agentReleases)
        .where(and(eq(agentReleases.version, b.version), eq(agentReleases.component, b.component), eq(agentReleases.os, b.os), eq(agentReleases.arch, b.arch)));
      if (existing) {
        if (existing.sha256 !== b.sha256 || existing.url !== b.url) throw agentsError('release_exists', { message: `${platformName(b)} ${b.version} is already registered with other contents` });
        out.push(existing);
        continue;
      }
      const [r] = await tx.db
        .insert(agentReleases)
        .values({ ...b, source: b.filePath ? 'local' : 'remote', createdAt: clock.now() })
        .onConflictDoNothing()
        .returning();
      if (!r) throw agentsError('release_exists', { message: `${platformName(b)} ${b.version} is already registered` });
      out.push(r);
    }
    await writeAudit(tx.db, info, { action, target: { type: 'agent_version', id: builds[0]?.version ?? '' }, details: { platforms: builds.map(platformName) } });
    return out;
  });
  await keel.invalidation.publish(CONFIG_TOPIC, '*');
  return rows;
}

export const releaseView = (r: ReleaseRow, base: string) => ({
  version: r.version,
  component: r.component as Component,
  os: r.os,
  arch: r.arch,
  url: r.url ?? `${base}/api/v1/agent-versions/${encodeURIComponent(r.version)}/download/${r.component}/${encodeURIComponent(r.os)}/${encodeURIComponent(r.arch)}`,
  sha256: r.sha256,
  size: r.size,
  source: r.source,
  signed: r.keyId !== null,
  keyId: r.keyId,
  createdAt: r.createdAt.toISOString(),
});

/** What auto-promote did: `promoted`, `off` (AGENT_AUTO_PROMOTE=false) or `skipped` (with the reason). */
export interface AutoPromoted {
  promoted: string[];
  autoPromote: { status: 'promoted' | 'off' | 'skipped'; reason: 'mfa_required' | 'user_required' | 'downgrade' | 'not_requested' | null };
}

/** A registration that asked not to be promoted (`?promote=false`, what the console sends): it only registers. */
const notRequested: AutoPromoted = { promoted: [], autoPromote: { status: 'off', reason: 'not_requested' } };

/**
 * Auto-promote (AGENT_AUTO_PROMOTE): only when the caller could promote itself (the release rule,
 * release-writer.ts, decided again here so no path registers and promotes for a caller who could
 * not); never a downgrade; a refused promote leaves the target as it was.
 */
export async function autoPromote(keel: Keel, version: string, components: Component[], info: AuditRequestInfo, caller: Pick<Principal, 'kind' | 'sessionId' | 'mfa'>): Promise<AutoPromoted> {
  if (!keel.config.AGENT_AUTO_PROMOTE) return { promoted: [], autoPromote: { status: 'off', reason: null } };
  const refusal = releaseRefusal(caller);
  if (refusal) {
    await writeAudit(keel.db, info, { action: 'agent.version.promote', result: 'failure', target: { type: 'agent_version', id: version }, details: { reason: refusal, automatic: true } });
    return { promoted: [], autoPromote: { status: 'skipped', reason: refusal } };
  }
  const promoted: string[] = [];
  let downgrade = false;
  for (const component of [...new Set(components)]) {
    try {
      promoted.push(...(await promote(keel, { version, component }, info)).promoted);
    } catch (err) {
      if (!(err instanceof AppError && err.status === 409)) throw err;
      downgrade = true;
    }
  }
  return promoted.length === 0 && downgrade ? { promoted, autoPromote: { status: 'skipped', reason: 'downgrade' } } : { promoted, autoPromote: { status: 'promoted', reason: null } };
}

/** A build uploaded to Keel (BINARY_SOURCE=local): stored under DATA_DIR by its SHA-256. */
export async function registerUpload(
  keel: Keel,
  meta: { version: string; component: Component; os: string; arch: string; signature?: string | undefined },
  file: Uint8Array,
  info: AuditRequestInfo,
  caller: Pick<Principal, 'kind' | 'sessionId' | 'mfa'>,
  opts: { promote: boolean } = { promote: true },
) {
  if (keel.config.BINARY_SOURCE !== 'local') throw agentsError('binary_source_remote');
  if (file.byteLength === 0) throw platformError('validation_failed', { message: 'The file is empty', details: { fields: [{ path: 'file', message: 'is empty' }] } });
  const sha256 = sha256Hex(Buffer.from(file));
  const build: BuildInput = { ...meta, url: null, sha256, size: file.byteLength, filePath: sha256 };
  // Refused before the file is stored: nothing is written for a build that is not signed.
  await verifyBuilds(keel, [build], info, 'agent.version.register');
  const dir = releaseDir(keel);
  mkdirSync(dir, { recursive: true });
  const target = join(dir, sha256);
  if (!existsSync(target)) {
    const partial = `${target}.${randomToken(6)}.partial`;
    writeFileSync(partial, file);
    renameSync(partial, target);
  }
  const [row] = await registerBuilds(keel, [build], info, 'agent.version.register');
  if (!row) throw new Error('release registration returned nothing');
  return { ...releaseView(row, keel.config.publicUrl), ...(opts.promote ? await autoPromote(keel, meta.version, [meta.component], info, caller) : notRequested) };
}

export async function registerRemote(
  keel: Keel,
  b: { version: string; component: Component; os: string; arch: string; url: string; sha256: string; size: number; signature?: string | undefined },
  info: AuditRequestInfo,
  caller: Pick<Principal, 'kind' | 'sessionId' | 'mfa'>,
  opts: { promote: boolean } = { promote: true },
) {
  checkReleaseUrl(keel, b.url);
  const [row] = await registerBuilds(keel, [{ ...b, sha256: b.sha256.toLowerCase(), filePath: null }], info, 'agent.version.register');
  if (!row) throw new Error('release registration returned nothing');
  return { ...releaseView(row, keel.config.publicUrl), ...(opts.promote ? await autoPromote(keel, b.version, [b.component], info, caller) : notRequested) };
}

export function checkReleaseUrl(keel: Keel, url: string): void {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw platformError('validation_failed', { message: 'url must be an absolute URL', details: { fields: [{ path: 'url', message: 'must be an absolute URL' }] } });
  }
  if (u.protocol !== 'https:' && !(keel.config.ALLOW_INSECURE_TARGETS && u.protocol === 'http:')) {
    throw platformError('validation_failed', { message: 'url must use https', details: { fields: [{ path: 'url', message: 'must use https' }] } });
  }
}

/** The stored file of a local build, for the download route. */
export async function localBuild(keel: Keel, version: string, component: string, os: string, arch: string): Promise<{ path: string; size: number; sha256: string }> {
  const [r] = await keel.db
    .select()
    .from(agentReleases)
    .where(and(eq(agentReleases.version, version), eq(agentReleases.component, component), eq(agentReleases.os, os), eq(agentReleases.arch, arch)));
  if (!r || !r.filePath) throw notFound('Build');
  return { path: join(releaseDir(keel), r.filePath), size: r.size, sha256: r.sha256 };
}

// ---------------------------------------------------------------------------------------------
// Promote and rollout

export interface PromoteInput {
  version: string;
  component?: Component | undefined;
  rollout?: { percent?: number | undefined; rings?: RingInput[] | undefined } | undefined;
  allowDowngrade?: boolean | undefined;
}

/**
 * Sets the fleet target of each (component, os, arch) build the version has. One promote at a time
 * (a transaction-scoped advisory lock) and a unique index on (component, os, arch): concurrent promotes
 * leave exactly one target per platform, and the downgrade check sees the committed target.
 */
export async function promote(keel: Keel, input: PromoteInput, info: AuditRequestInfo) {
  const builds = await keel.db
    .select()
    .from(agentReleases)
    .where(and(eq(agentReleases.version, input.version), input.component ? eq(agentReleases.component, input.component) : undefined));
  if (builds.length === 0) throw notFound('Agent version');
  const percent = input.rollout?.percent ?? 100;
  const rings = input.rollout?.rings ?? [];
  await checkRingGroups(keel.db, rings);
  const now = clock.now();
  const promoted = await transaction(keel.db, async (tx) => {
    await tx.db.execute(sql`select pg_advisory_xact_lock(${PROMOTE_LOCK})`);
    const current = await tx.db.select().from(agentTargets);
    const byKey = new Map(current.map((t) => [platformName(t), t]));
    for (const b of builds) {
      const t = byKey.get(platformName(b));
      if (t && !input.allowDowngrade && compareVersions(input.version, t.version) < 0) {
        throw agentsError('downgrade_refused', { message: `${platformName(b)} is on ${t.version}; promoting ${input.version} would be a downgrade (set allowDowngrade)`, details: { platform: platformName(b), current: t.version } });
      }
    }
    // The rings of each promoted component (before its targets: rings.ts's lock order); the versions
    // the component's other platforms keep as their target keep theirs.
    const promotedNames = new Set(builds.map(platformName));
    for (const component of new Set(builds.map((b) => b.component))) {
      const keep = current.filter((t) => t.component === component && !promotedNames.has(platformName(t))).map((t) => t.version);
      await replaceRings(tx, component, input.version, keep, rings, now);
    }
    for (const b of builds) {
      await tx.db
        .insert(agentTargets)
        .values({ component: b.component, os: b.os, arch: b.arch, version: input.version, rolloutPercent: percent, rolloutStatus: 'active', promotedAt: now, reportsSince: now, updatedAt: now })
        .onConflictDoUpdate({
          target: [agentTargets.component, agentTargets.os, agentTargets.arch],
          set: { version: input.version, rolloutPercent: percent, rolloutStatus: 'active', promotedAt: now, reportsSince: now, updatedAt: now },
        });
    }
    const names = builds.map(platformName).sort();
    await writeAudit(tx.db, info, { action: 'agent.version.promote', target: { type: 'agent_version', id: input.version }, details: { platforms: names, percent, allowDowngrade: Boolean(input.allowDowngrade), ...(rings.length > 0 ? { rings } : {}) } });
    return names;
  });
  await keel.invalidation.publish(CONFIG_TOPIC, '*');
  // Platforms with enrolled devices that this version has no build for keep their current target.
  const components = [...new Set(builds.map((b) => b.component))];
  const fleet = await keel.db.selectDistinct({ os: devices.os, arch: devices.arch }).from(devices).where(isNull(devices.decommissionedAt));
  const missing: string[] = [];
  for (const component of components) {
    for (const p of fleet) {
      if (!p.os || !p.arch) continue;
      const name = platformName({ component, os: p.os, arch: p.arch });
      if (!promoted.includes(name)) missing.push(name);
    }
  }
  return { version: input.version, promoted, missing: missing.sort(), rollout: { percent, rings } };
}

/** Widens (never narrows) the rollout of the current targets of a component (all components when omitted). */
export async function widenRollout(keel: Keel, component: Component | undefined, percent: number, info: AuditRequestInfo) {
  const rows = await transaction(keel.db, async (tx) => {
    await tx.db.execute(sql`select pg_advisory_xact_lock(${PROMOTE_LOCK})`);
    const where = component ? eq(agentTargets.component, component) : undefined;
    const targets = await tx.db.select().from(agentTargets).where(where);
    if (targets.length === 0) throw notFound('Rollout');
    const narrower = targets.find((t) => t.rolloutPercent > percent);
    if (narrower) throw agentsError('rollout_narrowing', { message: `The rollout of ${platformName(narrower)} is already at ${narrower.rolloutPercent}%` });
    const updated = await tx.db.update(agentTargets).set({ rolloutPercent: percent, updatedAt: clock.now() }).where(where).returning();
    await writeAudit(tx.db, info, { action: 'agent.rollout.widen', details: { component: component ?? 'all', percent } });
    return updated;
  });
  await keel.invalidation.publish(CONFIG_TOPIC, '*');
  return { updated: rows.map(platformName).sort(), percent };
}

/** Resumes halted rollouts; failure counting restarts from now. */
export async function resumeRollout(keel: Keel, component: Component | undefined, info: AuditRequestInfo) {
  const rows = await transaction(keel.db, async (tx) => {
    await tx.db.execute(sql`select pg_advisory_xact_lock(${PROMOTE_LOCK})`);
    await resumeRings(tx, component, clock.now());
    const updated = await tx.db
      .update(agentTargets)
      .set({ rolloutStatus: 'active', reportsSince: clock.now(), updatedAt: clock.now() })
      .where(and(eq(agentTargets.rolloutStatus, 'halted'), component ? eq(agentTargets.component, component) : undefined))
      .returning();
    if (updated.length === 0) throw agentsError('not_halted');
    await writeAudit(tx.db, info, { action: 'agent.rollout.resume', details: { component: component ?? 'all', platforms: updated.map(platformName) } });
    return updated;
  });
  await keel.invalidation.publish(CONFIG_TOPIC, '*');
  return { resumed: rows.map(platformName).sort() };
}

export const ROLLOUT_STATUSES = ['active', 'halted', 'complete', 'failing', 'complete_with_failures'] as const;
export type RolloutStatus = (typeof ROLLOUT_STATUSES)[number];

interface RolloutView {
  percent: number;
  status: RolloutStatus;
  succeeded: number;
  failed: number;
  devices: number;
  pending: number;
  blocked: number;
  rings: RingView[];
}

/**
 * A rollout's status (docs/decisions.md "Honest rollouts"), from the fleet's numbers: `halted`; else
 * `failing` when failures were reported (since the promote or resume) with no success (no succeeded
 * report, no device on the version); else, at 100 % with no device left to update and at least one
 * on the version, `complete` (no failure, no device blocked on the version) or
 * `complete_with_failures`; else `active`. Never `complete` right after a promote that updated nobody.
 */
export function rolloutStatus(n: { halted: boolean; percent: number; succeeded: number; failed: number; onVersion: number; pending: number; blocked: number }): RolloutStatus {
  if (n.halted) return 'halted';
  if (n.failed > 0 && n.succeeded === 0 && n.onVersion === 0) return 'failing';
  if (n.percent >= 100 && n.pending === 0 && n.onVersion > 0) return n.failed > 0 || n.blocked > 0 ? 'complete_with_failures' : 'complete';
  return 'active';
}

/**
 * The live devices on the platforms whose target this version is that run the component: on it
 * (`onVersion`), still to update (`pending`: auto-update on, not blocked) and blocked on it (failed or
 * rolled back, not retried). `all` counts the fleet (the status is the fleet's); `visible` what the
 * caller sees.
 */
async function rolloutDevices(keel: Keel, component: string, version: string, visible: SQL | undefined) {
  const isBlocked = sql`exists (select 1 from ${agentOffers} o where o.device_id = ${devices.id} and o.component = ${component} and o.version = ${version} and o.blocked)`;
  const installed = sql`${devices.components}->>${component}`;
  const seen = visible ?? sql`true`;
  const [r] = rowsOf<Record<string, number | string>>(
    await keel.db.execute(sql`
      select count(*) filter (where ${installed} = ${version})::int as on_version,
        count(*) filter (where ${installed} <> ${version} and ${devices.autoUpdate} and not ${isBlocked})::int as pending,
        count(*) filter (where ${installed} <> ${version} and ${isBlocked})::int as blocked,
        count(*) filter (where ${installed} <> ${version} and ${devices.autoUpdate} and not ${isBlocked} and ${seen})::int as visible_pending,
        count(*) filter (where ${installed} <> ${version} and ${isBlocked} and ${seen})::int as visible_blocked
      from ${devices} join ${agentTargets} t on t.component = ${component} and t.version = ${version} and t.os = ${devices.os} and t.arch = ${devices.arch}
      where ${devices.decommissionedAt} is null and ${installed} is not null`),
  );
  const n = (k: string) => Number(r?.[k] ?? 0);
  return { all: { onVersion: n('on_version'), pending: n('pending'), blocked: n('blocked') }, visible: { pending: n('visible_pending'), blocked: n('visible_blocked') } };
}

/** Every registered (version, component) with its builds, the devices on it, and its rollout when it is a target. */
export async function listVersions(keel: Keel, access: AccessContext) {
  const releases = await keel.db.select().from(agentReleases);
  const targets = await keel.db.select().from(agentTargets);
  // The devices the caller sees: its organisations, narrowed by its sites and device groups.
  const visible = and(visibleOrgCondition(access, devices.orgId), placementFilter(access, devices));
  const countRows = rowsOf<{ component: string; version: string; n: number }>(
    await keel.db.execute(sql`
      select c.key as component, c.value as version, count(*)::int as n
      from ${devices}, jsonb_each_text(${devices.components}) c
      where ${devices.decommissionedAt} is null ${visible ? sql`and ${visible}` : sql``}
      group by c.key, c.value`),
  );
  const counts = new Map(countRows.map((r) => [`${r.component}@${r.version}`, r.n]));
  const groups = new Map<string, ReleaseRow[]>();
  for (const r of releases) {
    const key = `${r.component}@${r.version}`;
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  const entries = [];
  for (const [key, builds] of groups) {
    const first = builds[0];
    if (!first) continue;
    const { version, component } = first;
    const mine = targets.filter((t) => t.component === component && t.version === version);
    let rollout: RolloutView | null = null;
    if (mine.length > 0) {
      const { succeeded, failed } = await reportCounts(keel.db, component, version);
      const fleet = await rolloutDevices(keel, component, version, visible);
      const percent = Math.min(...mine.map((t) => t.rolloutPercent));
      const halted = mine.some((t) => t.rolloutStatus === 'halted');
      const status = rolloutStatus({ halted, percent, succeeded, failed, ...fleet.all });
      const rings = await ringsView(keel.db, access, component, version, halted, visible);
      rollout = { percent, status, succeeded, failed, devices: counts.get(key) ?? 0, pending: fleet.visible.pending, blocked: fleet.visible.blocked, rings };
    }
    entries.push({
      version,
      component: component as Component,
      prerelease: isPrerelease(version),
      builds: builds.map((b) => releaseView(b, keel.config.publicUrl)),
      deviceCount: counts.get(key) ?? 0,
      target: mine.map(platformName).sort(),
      rollout,
    });
  }
  entries.sort((a, b) => COMPONENTS.indexOf(a.component) - COMPONENTS.indexOf(b.component) || compareVersions(b.version, a.version));
  return entries;
}
