import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { PERMISSION_CATALOG } from './catalog.js';
import type { PermissionSet } from './permissions.js';
import { resolveRole } from './role-cache.js';
import { assignableRole } from './roles.js';

/** A directory group mapped to a role of the organisation (SSO providers and SCIM settings alike). */
export interface GroupRoleMapping {
  group: string;
  roleId: string;
  /** A partner SSO provider's mapping: `orgAccess: selected` with these organisations (docs/decisions.md "Partner-level SSO"). */
  orgIds?: string[] | undefined;
}

/** Why a mapping whose group the person is in gave no role. */
export interface SkippedMapping {
  group: string;
  roleId: string;
  reason: 'not_assignable' | 'beyond_grantor';
}

/**
 * A role's weight among mappings: the entries of the permission catalogue it grants, those that
 * change something (any action but `read`) counted first, then all of them. So a role that may act
 * outranks one that may only see more (Organization Technician over Organization Read Only).
 */
function weight(permissions: PermissionSet): number {
  let acting = 0;
  let all = 0;
  for (const p of PERMISSION_CATALOG) {
    if (!permissions.has(p.resource, p.action)) continue;
    all += 1;
    if (p.action !== 'read') acting += 1;
  }
  return acting * (PERMISSION_CATALOG.length + 1) + all;
}

/**
 * The one rule by which a person's directory groups give a role in an organisation, used by SSO's
 * group mappings at sign-in and by SCIM's groups (docs/decisions.md "SCIM"): of the mappings whose
 * group the person is in (group names compared without case), those whose role is still assignable
 * in the organisation and, when `mayGrant` is given, within what the grantor may grant; of these the
 * role with the most permissions (`weight`: acting entries of the catalogue, then all), the earlier
 * mapping on a tie. Null when
 * none applies. Decided on every use, so a role edited or a grantor demoted since the mapping was
 * saved counts as it is now. For a partner (partner SSO, docs/decisions.md "Partner-level SSO") the
 * same rule over the partner's roles; `mapping` is the winning mapping (its `orgIds`, if any, give the
 * person's organisation list).
 */
export async function roleFromGroups<M extends GroupRoleMapping>(
  source: Keel | Db,
  tenant: string | { orgId: string } | { partnerId: string },
  mappings: readonly M[],
  groups: readonly string[],
  mayGrant?: (permissions: PermissionSet) => boolean,
): Promise<{ roleId: string | null; mapping: M | null; skipped: SkippedMapping[] }> {
  const db = 'modules' in source ? source.db : source;
  // An organisation (its id, as SSO and SCIM of organisations give it) or a partner (partner SSO: partner-scoped roles).
  const target = typeof tenant === 'string' ? { orgId: tenant } : tenant;
  const held = new Set(groups.map((g) => g.toLowerCase()));
  const skipped: SkippedMapping[] = [];
  let best: { mapping: M; weight: number } | null = null;
  for (const m of mappings) {
    if (!held.has(m.group.toLowerCase())) continue;
    const resolved = (await assignableRole(db, m.roleId, target)) ? await resolveRole(source, m.roleId) : null;
    if (!resolved) {
      skipped.push({ group: m.group, roleId: m.roleId, reason: 'not_assignable' });
      continue;
    }
    if (mayGrant && !mayGrant(resolved.permissions)) {
      skipped.push({ group: m.group, roleId: m.roleId, reason: 'beyond_grantor' });
      continue;
    }
    const w = weight(resolved.permissions);
    if (!best || w > best.weight) best = { mapping: m, weight: w };
  }
  return { roleId: best?.mapping.roleId ?? null, mapping: best?.mapping ?? null, skipped };
}
