import type { Context, TypedResponse } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';

/*
 * The JSON of a value a cache hands out unchanged until it drops it (the self-profile of
 * `GET /users/me`, the hottest authenticated read), serialized once per object rather than once per
 * request: JSON.stringify was about 5% of that read's CPU (bench/README.md "Figures at stop 25"). Keyed by the
 * object, so a dropped and reloaded value is a new object and serialized afresh; a cached value must
 * never be changed in place (it is shared by every request already).
 */
const serialized = new WeakMap<object, string>();
const JSON_TYPE = { 'Content-Type': 'application/json' } as const;

/** `c.json(value, status)`, the body serialized once per `value` object. */
export function cachedJson<T extends object, U extends ContentfulStatusCode>(c: Context, value: T, status: U): Response & TypedResponse<T, U, 'json'> {
  let text = serialized.get(value);
  if (text === undefined) {
    text = JSON.stringify(value);
    serialized.set(value, text);
  }
  // The same answer as c.json: hono's content type, the status, the body.
  return c.body(text, status, JSON_TYPE) as unknown as Response & TypedResponse<T, U, 'json'>;
}
