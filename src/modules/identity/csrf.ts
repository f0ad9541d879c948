import type { KeyObject } from 'node:crypto';
import type { Keel } from '../../keel.js';
import { constantTimeEqual, hmacSha256Hex } from '../../platform/crypto.js';

/*
 * The `service_csrf` value bound to a session (docs/decisions.md "Tokens and sessions": double submit, constant-time). The cookie and
 * header handling is HTTP (request.ts); the value and its check are the session's, used by the refresh
 * rotation (service.ts).
 */

/**
 * The keys of the CSRF values: one derived from each JWT secret (the first signs, every one verifies,
 * so rotating JWT_SECRET keeps cookie refreshes working through JWT_SECRETS_PREVIOUS); derived when
 * the module is installed (context.ts `installIdentity`).
 */
const csrfKeys = (keel: Keel): KeyObject[] => keel.modules.get('identity').csrfKeys;

const csrfUnder = (key: KeyObject, sessionId: string) => hmacSha256Hex(key, sessionId);

/**
 * The `service_csrf` value of a session: an HMAC of its id under a server key. A cookie planted from a
 * sibling subdomain cannot carry it (the attacker knows neither the key nor the victim's session).
 */
export function csrfValueFor(keel: Keel, sessionId: string): string {
  const [signing] = csrfKeys(keel);
  if (!signing) throw new Error('no JWT secret');
  return csrfUnder(signing, sessionId);
}

/** True when `value` is the CSRF value of the session (constant-time, under any current or previous key). */
export function csrfMatchesSession(keel: Keel, sessionId: string, value: string): boolean {
  let ok = false;
  for (const key of csrfKeys(keel)) ok = constantTimeEqual(csrfUnder(key, sessionId), value) || ok;
  return ok;
}
