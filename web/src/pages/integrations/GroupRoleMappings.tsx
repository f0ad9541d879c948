// The group-to-role mapping rows of an SSO provider and of an organisation's SCIM settings: one editor,
// as the server decides both with one rule (access/group-roles.ts `roleFromGroups`).
import { Button, Field, Select } from '../../ui';

export interface GroupRoleMapping {
  group: string;
  roleId: string;
}

export function GroupRoleMappings({
  mappings,
  onChange,
  roles,
  errors,
}: {
  mappings: GroupRoleMapping[];
  onChange: (next: GroupRoleMapping[]) => void;
  roles: { id: string; name: string }[];
  /** Field errors of the form, keyed `groupRoleMappings.<i>.group` / `.roleId`. */
  errors: Record<string, string | undefined>;
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
        </div>
      ))}
      <Button type="button" kind="secondary" onClick={() => onChange([...mappings, { group: '', roleId: '' }])}>
        Add a mapping
      </Button>
    </>
  );
}
