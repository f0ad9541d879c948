import type { Keel } from '../../keel.js';
import { constantTimeEqual, hmacSha256Hex } from '../../platform/crypto.js';

/*
 * The `service_csrf` value bound to a session (DECISIONS: double submit, constant-time). The cookie and
 * header handling is HTTP (request.ts); the value and its check are the session's, used by the refresh
 * rotation (service.ts).
 */

const csrfKeysOf = new WeakMap<Keel, string[]>();

/**
 * The keys of the CSRF values: one derived from each JWT secret (the first signs, every one verifies,
 * so rotating JWT_SECRET keeps cookie refreshes working through JWT_SECRETS_PREVIOUS).
 */
function csrfKeys(keel: Keel): string[] {
  let keys = csrfKeysOf.get(keel);
  if (!keys) {
    keys = keel.secrets.jwtSecrets.map((s) => hmacSha256Hex(s, 'keel:service_csrf:v1'));
    csrfKeysOf.set(keel, keys);
  }
  return keys;
}

const csrfUnder = (key: string, sessionId: string) => hmacSha256Hex(key, sessionId);

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
