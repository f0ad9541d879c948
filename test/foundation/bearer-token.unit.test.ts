import { describe, expect, it } from 'vitest';
import { bearerToken } from '../../src/platform/http/bearer-token.js';

/** The rule the fast path must keep: the scheme in any case, then whitespace, one token, optional trailing whitespace. */
const RULE = /^Bearer\s+(\S+)\s*$/i;

describe('bearerToken', () => {
  it('reads the token exactly as the Authorization rule does, in every spelling', () => {
    const headers = [
      'Bearer abc.def.ghi', 'bearer abc', 'BEARER abc', 'Bearer  abc', 'Bearer\tabc', 'Bearer abc ', 'Bearer abc\t',
      'Bearer ', 'Bearer', '', 'Basic abc', 'Bearer a b', 'Bearer a\nb', 'Bearerabc', ' Bearer abc', 'Bearer \u00a0abc',
      'Bearer abc\u00a0', 'Bearer keel_abc123', 'Token abc', 'Bearer\u2003abc',
    ];
    for (const header of headers) expect(bearerToken(header), JSON.stringify(header)).toBe(RULE.exec(header)?.[1]);
  });
});
