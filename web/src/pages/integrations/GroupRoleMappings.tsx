// The group-to-role mapping rows of an SSO provider and of an organisation's SCIM settings: one editor,
// as the server decides both with one rule (access/group-roles.ts `roleFromGroups`).
import { Button, Checkbox, Field, Select } from '../../ui';

export interface GroupRoleMapping {
  group: string;
  roleId: string;
  /** A partner provider's mapping: the organisations it gives (`orgAccess: selected`); none: the provider's orgAccess. */
  orgIds?: string[];
}

export function GroupRoleMappings({
  mappings,
  onChange,
  roles,
  errors,
  orgs,
}: {
  mappings: GroupRoleMapping[];
  onChange: (next: GroupRoleMapping[]) => void;
  roles: { id: string; name: string }[];
  /** Field errors of the form, keyed `groupRoleMappings.<i>.group` / `.roleId`. */
  errors: Record<string, string | undefined>;
  /** A partner provider's organisations: each mapping may name some of them (docs/decisions.md "Partner-level SSO"). */
  orgs?: { id: string; name: string }[];
}) {
  const set = (i: number, change: Partial<GroupRoleMapping>) => onChange(mappings.map((x, j) => (j === i ? { ...x, ...change } : x)));
  return (
    <>
      {mappings.map((m, i) => (
        <div className="kv-row" key={i}>
          <Field label={`Group ${i + 1}`} value={m.group} maxLength={255} onChange={(e) => set(i, { group: e.target.value })} error={errors[`groupRoleMappings.${i}.group`]} />
          <Select label={`Role for group ${i + 1}`} value={m.roleId} onChange={(e) => set(i, { roleId: e.target.value })} error={errors[`groupRoleMappings.${i}.roleId`]}>
            <option value="">— pick a role —</option>
            {roles.map((r) => (
              <option key={r.id} value={r.id}>
                {r.name}
              </option>
            ))}
          </Select>
          <Button type="button" kind="link" onClick={() => onChange(mappings.filter((_, j) => j !== i))} aria-label={`Remove mapping ${i + 1}`}>
            Remove
          </Button>
          {orgs && orgs.length > 0 && (
            <fieldset>
              <legend>Organisations for group {i + 1} (none ticked: as set for the provider)</legend>
              {orgs.map((o) => (
                <Checkbox
                  key={o.id}
                  label={o.name}
                  checked={(m.orgIds ?? []).includes(o.id)}
                  onChange={(on) => set(i, { orgIds: on ? [...(m.orgIds ?? []), o.id] : (m.orgIds ?? []).filter((x) => x !== o.id) })}
                />
              ))}
              {errors[`groupRoleMappings.${i}.orgIds`] && <div className="field-error">{errors[`groupRoleMappings.${i}.orgIds`]}</div>}
            </fieldset>
          )}
        </div>
      ))}
      <Button type="button" kind="secondary" onClick={() => onChange([...mappings, { group: '', roleId: '' }])}>
        Add a mapping
      </Button>
    </>
  );
}
