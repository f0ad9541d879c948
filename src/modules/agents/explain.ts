import { and, eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import type { AccessContext } from '../access/scope.js';
import { deviceGroups, organizations, partners, sites } from '../tenancy/schema.js';
import { agentOffers } from './schema.js';
import { decideAll, decisionDetail, type Component, type DecisionRule } from './decision.js';
import { visibleDevice } from './devices.js';
import type { Agents } from './heartbeat.js';

export interface DecisionView {
  component: Component;
  offer: string | null;
  rule: DecisionRule;
  detail: string;
}

/**
 * `GET /devices/:id/update-decision`: per component, what the device's next heartbeat would be offered
 * and the rule that decided, by the heartbeat's own decision (`decideAll`, on the same caches), with a
 * sentence naming the level that pinned it.
 */
export async function explainDecision(ctx: Agents, access: AccessContext, id: string): Promise<DecisionView[]> {
  const { keel } = ctx;
  const d = await visibleDevice(keel, access, id);
  const [org] = await keel.db.select({ name: organizations.name, partnerId: organizations.partnerId }).from(organizations).where(eq(organizations.id, d.orgId));
  const partnerId = org?.partnerId ?? null;
  const names = await levelNames(keel, { siteId: d.siteId, deviceGroupId: d.deviceGroupId, partnerId });
  const { pins, window } = await ctx.state.policy({ id: d.id, orgId: d.orgId, partnerId, siteId: d.siteId, deviceGroupId: d.deviceGroupId });
  const targets = await ctx.state.targets();
  const builds = d.os && d.arch ? await ctx.state.builds(d.os, d.arch) : () => undefined;
  const blockedRows = await keel.db
    .select({ component: agentOffers.component, version: agentOffers.version })
    .from(agentOffers)
    .where(and(eq(agentOffers.deviceId, d.id), eq(agentOffers.blocked, true)));
  const blocked = new Set(blockedRows.map((b) => `${b.component}@${b.version}`));
  const decisions = decideAll({
    deviceId: d.id,
    os: d.os,
    arch: d.arch,
    components: d.components,
    deviceGroupId: d.deviceGroupId,
    autoUpdate: d.autoUpdate,
    updateNow: d.updateNow,
    window,
    pins,
    now: clock.now(),
    blocked: (c, v) => blocked.has(`${c}@${v}`),
    target: (c, os, arch) => targets.get(`${c}/${os}/${arch}`),
    build: (v, c) => builds(v, c),
  });
  return decisions.map((r) => ({ component: r.component, offer: r.offer, rule: r.rule, detail: decisionDetail(r, { ...names, org: org?.name }) }));
}

async function levelNames(keel: Keel, d: { siteId: string | null; deviceGroupId: string | null; partnerId: string | null }) {
  const [group] = d.deviceGroupId ? await keel.db.select({ name: deviceGroups.name }).from(deviceGroups).where(eq(deviceGroups.id, d.deviceGroupId)) : [];
  const [site] = d.siteId ? await keel.db.select({ name: sites.name }).from(sites).where(eq(sites.id, d.siteId)) : [];
  const [partner] = d.partnerId ? await keel.db.select({ name: partners.name }).from(partners).where(eq(partners.id, d.partnerId)) : [];
  return { group: group?.name, site: site?.name, partner: partner?.name };
}
