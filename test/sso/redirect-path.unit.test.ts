/**
 * The post-login path of an SSO sign-in (`redirect` of /sso/login/:orgId): only a same-origin relative
 * path, as given and as normalised (docs/decisions.md "Organisation single sign-on").
 */
import { describe, expect, it } from 'vitest';
import type { Keel } from '../../src/keel.js';
import { AppError } from '../../src/platform/http/errors.js';
import { safeRedirectPath } from '../../src/modules/sso/login.js';

const keel = { config: { publicUrl: 'https://keel.example.com' } } as unknown as Keel;

describe('safeRedirectPath', () => {
  const refused: string[] = [
    '//x', '//evil.com/path', '/\\x', '/\\/evil.com', '\\\\x', '\\x', '/.//x', '/././/evil.com', '/..//x', '/a/../..//evil.com',
    '/%2f%2fx', '/%2F%2Fevil.com', '/%5c%5cx', '/%5C/evil.com', '/a%2f..%2f..%2f/evil.com',
    '/\tx', '/\t/evil.com', '/\n/evil.com', '/x\r\n', '/\u0000x', '/x\u007f',
    'https://evil.com', 'http:/evil.com', 'javascript:alert(1)', 'x', './/x', ' /x', `/${'a'.repeat(500)}`,
  ];
  it.each(refused)('refuses %j with 400 naming redirect', (raw) => {
    let caught: unknown;
    try {
      safeRedirectPath(keel, raw);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(AppError);
    expect((caught as AppError).status).toBe(400);
    expect(JSON.stringify((caught as AppError).details)).toContain('"path":"redirect"');
  });

  const allowed: [string | undefined, string][] = [
    [undefined, '/'],
    ['', '/'],
    ['/', '/'],
    ['/devices?tab=all', '/devices?tab=all'],
    ['/a/./b/../c', '/a/c'],
    ['/devices?next=%2F%2Fx', '/devices?next=%2F%2Fx'], // an encoded slash in the query is data, not a path
    ['/devices#frag', '/devices'],
    ['/ünïcode', '/%C3%BCn%C3%AFcode'],
  ];
  it.each(allowed)('keeps %j as %j', (raw, expected) => {
    const out = safeRedirectPath(keel, raw);
    expect(out).toBe(expected);
    expect(out.startsWith('/') && !out.startsWith('//')).toBe(true);
  });
});
