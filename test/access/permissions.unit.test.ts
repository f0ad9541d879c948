import { describe, expect, it } from 'vitest';
import { canonicalize, grants, intersect, PermissionSet, permissionKey } from '../../src/modules/access/permissions.js';
import { PERMISSION_CATALOG, SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { RoleCache } from '../../src/modules/access/role-cache.js';
import type { Db } from '../../src/platform/db/client.js';

const p = (s: string) => {
  const [resource = '', action = ''] = s.split(':');
  return { resource, action };
};
const set = (...s: string[]) => new PermissionSet(s.map(p));

describe('the permission matcher', () => {
  it('matches exact pairs and wildcards on either side', () => {
    expect(set('users:read').has('users', 'read')).toBe(true);
    expect(set('users:read').has('users', 'write')).toBe(false);
    expect(set('users:*').has('users', 'invite')).toBe(true);
    expect(set('*:read').has('devices', 'read')).toBe(true);
    expect(set('*:read').has('devices', 'write')).toBe(false);
    expect(set('*:*').has('anything', 'at_all')).toBe(true);
    expect(set().has('users', 'read')).toBe(false);
  });

  it('agrees with the single-pair matcher for every catalog pair against every grant', () => {
    for (const g of PERMISSION_CATALOG) {
      const s = new PermissionSet([g]);
      for (const q of PERMISSION_CATALOG) expect(s.has(q.resource, q.action), `${permissionKey(g)} vs ${permissionKey(q)}`).toBe(grants(g, q.resource, q.action));
    }
  });

  it('reads a requested pattern literally: only an equal or wider grant covers it', () => {
    expect(set('devices:read', 'devices:write', 'devices:delete', 'devices:execute').covers(p('devices:*'))).toBe(false);
    expect(set('devices:*').covers(p('devices:*'))).toBe(true);
    expect(set('*:*').covers(p('*:read'))).toBe(true);
    expect(set('*:read').covers(p('*:*'))).toBe(false);
    expect(set('users:read').missing([p('users:read'), p('users:write')])).toEqual([p('users:write')]);
  });
});

describe('canonicalize', () => {
  it('maps the builder vocabulary', () => {
    expect(canonicalize(p('devices:view'))).toEqual({ ok: true, pair: p('devices:read') });
    expect(canonicalize(p('devices:create'))).toEqual({ ok: true, pair: p('devices:write') });
    expect(canonicalize(p('devices:update'))).toEqual({ ok: true, pair: p('devices:write') });
    expect(canonicalize(p('devices:delete'))).toEqual({ ok: true, pair: p('devices:delete') });
    expect(canonicalize(p('scripts:execute'))).toEqual({ ok: true, pair: p('scripts:execute') });
    expect(canonicalize(p('users:invite'))).toEqual({ ok: true, pair: p('users:invite') });
    expect(canonicalize(p('*:view'))).toEqual({ ok: true, pair: p('*:read') });
  });

  it('refuses what is not in the catalog', () => {
    expect(canonicalize(p('devices:fly')).ok).toBe(false);
    expect(canonicalize(p('ships:read')).ok).toBe(false);
    expect(canonicalize(p('devices:acknowledge')).ok).toBe(false);
  });

  it('covers every seeded role permission', () => {
    for (const role of Object.values(SYSTEM_ROLES)) for (const q of role.permissions) expect(canonicalize(q).ok).toBe(true);
  });
});

describe('intersect (API keys)', () => {
  const granted = (list: { resource: string; action: string }[], r: string, a: string) => new PermissionSet(list).has(r, a);

  it('grants exactly what both sides grant', () => {
    const cases: [string[], string[]][] = [
      [['*:*'], ['users:read', 'devices:*']],
      [['*:read'], ['devices:*', 'users:write']],
      [['devices:*', 'users:read'], ['*:read', 'devices:execute']],
      [['users:read'], ['sites:read']],
      [['*:*'], ['*:*']],
    ];
    const probes = PERMISSION_CATALOG.map((c) => [c.resource, c.action] as const).concat([['anything', 'read'], ['devices', 'zap']]);
    for (const [a, b] of cases) {
      const meet = intersect(a.map(p), b.map(p));
      for (const [r, act] of probes) {
        expect(granted(meet, r, act), `${a.join()} ∩ ${b.join()} on ${r}:${act}`).toBe(granted(a.map(p), r, act) && granted(b.map(p), r, act));
      }
    }
  });
});

describe('RoleCache', () => {
  it('does not store a chain loaded while an invalidation arrived', async () => {
    let release: () => void = () => undefined;
    let version = 1;
    const rows = () => ({ rows: [{ id: 'r', name: 'R', parent_role_id: null, force_mfa: false, is_system: false, depth: 0, resource: 'users', action: version === 1 ? 'read' : 'write' }] });
    const db = {
      execute: async () => {
        const snapshot = rows();
        await new Promise<void>((r) => (release = r));
        return snapshot;
      },
    } as unknown as Db;
    const cache = new RoleCache(db);
    const loading = cache.resolve('r');
    await Promise.resolve();
    version = 2;
    cache.invalidate('r');
    release();
    const stale = await loading;
    expect(stale?.permissions.has('users', 'read')).toBe(true);
    expect(cache.size).toBe(0);
  });

  it('drops every entry whose chain contains the changed role, and only those', async () => {
    const row = (id: string, depth: number, parent: string | null) => ({ id, name: id, parent_role_id: parent, force_mfa: false, is_system: false, depth, resource: null, action: null });
    const answers = [{ rows: [row('child', 0, 'parent'), row('parent', 1, null)] }, { rows: [row('other', 0, null)] }];
    let calls = 0;
    const db = { execute: () => Promise.resolve(answers[calls++]) } as unknown as Db;
    const cache = new RoleCache(db);
    expect((await cache.resolve('child'))?.chain.map((r) => r.id)).toEqual(['child', 'parent']);
    await cache.resolve('other');
    expect(cache.size).toBe(2);
    await cache.resolve('child');
    expect(calls).toBe(2);
    cache.invalidate('parent');
    expect(cache.size).toBe(1);
    cache.invalidate('*');
    expect(cache.size).toBe(0);
  });
});

describe('site and device-group restrictions', () => {
  it('a device is visible only when it passes both filters; null means all', async () => {
    const { canSeePlacement } = await import('../../src/modules/access/scope.js');
    const device = { siteId: 's1', deviceGroupId: 'g1' };
    expect(canSeePlacement({ siteIds: null, deviceGroupIds: null }, device)).toBe(true);
    expect(canSeePlacement({ siteIds: ['s1'], deviceGroupIds: null }, device)).toBe(true);
    expect(canSeePlacement({ siteIds: ['s2'], deviceGroupIds: null }, device)).toBe(false);
    expect(canSeePlacement({ siteIds: ['s1'], deviceGroupIds: ['g2'] }, device)).toBe(false);
    expect(canSeePlacement({ siteIds: ['s1'], deviceGroupIds: ['g1'] }, device)).toBe(true);
    expect(canSeePlacement({ siteIds: ['s1'], deviceGroupIds: null }, { siteId: null, deviceGroupId: null })).toBe(false);
    expect(canSeePlacement({ siteIds: [], deviceGroupIds: null }, device)).toBe(false);
  });
});
