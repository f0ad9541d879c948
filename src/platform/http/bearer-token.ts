/* Reading `Authorization: Bearer …`: one rule for access tokens, API keys and device tokens. */

const BEARER = /^Bearer\s+(\S+)\s*$/i;
const WHITESPACE = /\s/;

/** The token of `Authorization: Bearer <token>` (scheme in any case, any spacing), else undefined. */
export function bearerToken(header: string): string | undefined {
  // The common spelling without the capturing regex (about 1% of a cached read); anything else takes it.
  if (header.startsWith('Bearer ')) {
    const token = header.slice(7);
    if (token.length > 0 && !WHITESPACE.test(token)) return token;
  }
  return BEARER.exec(header)?.[1];
}
