/**
 * The route matcher (platform/http/router.ts): hono's TrieRouter with matches remembered. It must
 * answer exactly what the TrieRouter answers (fixed paths beside parameters, middleware, methods),
 * forget everything when a route is added, and stay bounded.
 */
import { describe, expect, it } from 'vitest';
import { TrieRouter } from 'hono/router/trie-router';
import { CachedTrieRouter } from '../../src/platform/http/router.js';

const ROUTES: [string, string, string][] = [
  ['ALL', '*', 'context'],
  ['ALL', '/api/v1/*', 'gate'],
  ['GET', '/api/v1/roles/permissions/available', 'available'],
  ['GET', '/api/v1/roles/:id', 'role'],
  ['PATCH', '/api/v1/roles/:id', 'patch role'],
  ['GET', '/api/v1/users/me', 'me'],
  ['GET', '/api/v1/users/:id', 'user'],
  ['GET', '/api/v1/users/:id/sessions', 'user sessions'],
];

function both(): [TrieRouter<string>, CachedTrieRouter<string>] {
  const plain = new TrieRouter<string>();
  const cached = new CachedTrieRouter<string>();
  for (const [m, p, h] of ROUTES) {
    plain.add(m, p, h);
    cached.add(m, p, h);
  }
  return [plain, cached];
}

const handlers = (r: { match(m: string, p: string): unknown }, m: string, p: string) =>
  (r.match(m, p) as [[string, Record<string, string>][]])[0].map(([h, params]) => [h, { ...params }]);

describe('cached route matcher', () => {
  it('answers what the TrieRouter answers, first time and remembered', () => {
    const [plain, cached] = both();
    const cases: [string, string][] = [
      ['GET', '/api/v1/roles/permissions/available'],
      ['GET', '/api/v1/roles/0192f3a4-5b6c-7d8e-9f00-112233445566'],
      ['PATCH', '/api/v1/roles/abc'],
      ['GET', '/api/v1/users/me'],
      ['GET', '/api/v1/users/u1/sessions'],
      ['DELETE', '/api/v1/users/me'],
      ['GET', '/nowhere'],
    ];
    for (let round = 0; round < 2; round++) {
      for (const [m, p] of cases) expect(handlers(cached, m, p)).toEqual(handlers(plain, m, p));
    }
    expect(handlers(cached, 'GET', '/api/v1/roles/r7')).toEqual([['context', {}], ['gate', {}], ['role', { id: 'r7' }]]);
    expect(handlers(cached, 'GET', '/api/v1/roles/r8')).toEqual([['context', {}], ['gate', {}], ['role', { id: 'r8' }]]);
  });

  it('forgets remembered matches when a route is added', () => {
    const [, cached] = both();
    expect(handlers(cached, 'GET', '/api/v1/audit').map(([h]) => h)).toEqual(['context', 'gate']);
    cached.add('GET', '/api/v1/audit', 'audit');
    expect(handlers(cached, 'GET', '/api/v1/audit').map(([h]) => h)).toEqual(['context', 'gate', 'audit']);
  });

  it('stays bounded and keeps the paths in use', () => {
    const [, cached] = both();
    const me = cached.match('GET', '/api/v1/users/me');
    for (let i = 0; i < 5_000; i++) {
      cached.match('GET', `/api/v1/users/u${i}`);
      if (i % 100 === 0) expect(cached.match('GET', '/api/v1/users/me')).toBe(me);
    }
    expect(cached.size).toBeLessThanOrEqual(2_000);
    expect(cached.match('GET', '/api/v1/users/me')).toBe(me);
  });
});
