import type { Keel } from '../../keel.js';
import type { SsoErrorCode } from './constants.js';

/** Where a finished login goes: the original page, with the exchange code in the fragment (never sent to a server). */
export function successLocation(keel: Keel, redirectPath: string, code: string): string {
  return `${keel.config.publicUrl}${redirectPath}#ssoCode=${encodeURIComponent(code)}`;
}

/** Where a failed login goes: the login page with one of the codes of docs/specification.md "Single sign-on: the login flow" and nothing else. */
export function errorLocation(keel: Keel, code: SsoErrorCode): string {
  return `${keel.config.publicUrl}/login?error=${code}`;
}
