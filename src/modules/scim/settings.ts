import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { clock } from '../../platform/clock.js';
import { transaction } from '../../platform/db/transaction.js';
import { prepared, rawQuery, tableReader } from '../../platform/db/raw.js';
import { validationError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { SYSTEM_ROLES } from '../access/catalog.js';
import { assignableRole } from '../access/roles.js';
import { scimSettings, type ScimGroupRoleMapping } from './schema.js';

export interface ScimSettingsView {
  defaultRoleId: string;
  groupRoleMappings: ScimGroupRoleMapping[];
}

/** With no settings saved, a provisioned user is an Organization Read-Only member (the least a member holds). */
export const FALLBACK_ROLE_ID = SYSTEM_ROLES.orgReadOnly.id;

const settingsReader = tableReader(scimSettings);
/** Read by every `POST /Users` and group change: prepared (docs/decisions.md "SCIM at scale"). */
const SETTINGS_BY_ORG = prepared('scim_settings_by_org', `select ${settingsReader.columns} from scim_settings where org_id = $1`);

export async function getScimSettings(db: Db, orgId: string): Promise<ScimSettingsView> {
  const [raw] = await rawQuery(db, SETTINGS_BY_ORG, [orgId]);
  const row = raw ? settingsReader.read(raw) : undefined;
  return { defaultRoleId: row?.defaultRoleId ?? FALLBACK_ROLE_ID, groupRoleMappings: row?.groupRoleMappings ?? [] };
}

/** The role a user provisioned into this organisation gets: the saved default while it is still assignable here, else the fallback. */
export async function scimDefaultRole(db: Db, orgId: string): Promise<string> {
  const { defaultRoleId } = await getScimSettings(db, orgId);
  if (defaultRoleId === FALLBACK_ROLE_ID) return FALLBACK_ROLE_ID;
  return (await assignableRole(db, defaultRoleId, { orgId })) ? defaultRoleId : FALLBACK_ROLE_ID;
}

/**
 * `PUT /orgs/:orgId/scim-settings`: every role named must be assignable in the organisation (400
 * naming the field); then `authorize` (the route's rule of who may grant them). Audited
 * `scim_settings.update`. The save starts the re-decision of every managed member's role by the
 * saved mappings (reevaluation.ts), within what `saverId` may grant.
 */
export async function putScimSettings(
  keel: Keel,
  org: { orgId: string; partnerId: string | null },
  input: ScimSettingsView,
  info: AuditRequestInfo,
  authorize: (roleIds: string[]) => Promise<void>,
  saverId: string | null,
): Promise<ScimSettingsView> {
  const bad: { path: string; message: string }[] = [];
  if (!(await assignableRole(keel.db, input.defaultRoleId, { orgId: org.orgId }))) bad.push({ path: 'defaultRoleId', message: 'is not a role assignable in this organization' });
  const seen = new Set<string>();
  for (const [i, m] of input.groupRoleMappings.entries()) {
    if (!(await assignableRole(keel.db, m.roleId, { orgId: org.orgId }))) bad.push({ path: `groupRoleMappings.${i}.roleId`, message: 'is not a role assignable in this organization' });
    if (seen.has(m.group.toLowerCase())) bad.push({ path: `groupRoleMappings.${i}.group`, message: 'is mapped twice' });
    seen.add(m.group.toLowerCase());
  }
  if (bad.length > 0) throw validationError(bad);
  await authorize([input.defaultRoleId, ...input.groupRoleMappings.map((m) => m.roleId)]);
  await transaction(keel.db, async (tx) => {
    const values = { defaultRoleId: input.defaultRoleId, groupRoleMappings: input.groupRoleMappings, reevaluationPending: true, reevaluationCursor: null, reevaluationBy: saverId, updatedAt: clock.now() };
    await tx.db.insert(scimSettings).values({ orgId: org.orgId, ...values }).onConflictDoUpdate({ target: scimSettings.orgId, set: values });
    await writeAudit(tx.db, info, { action: 'scim_settings.update', orgId: org.orgId, partnerId: org.partnerId, target: { type: 'organization', id: org.orgId }, details: { defaultRoleId: input.defaultRoleId, mappings: input.groupRoleMappings.length } });
  });
  return input;
}
