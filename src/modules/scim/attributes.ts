import { ENTERPRISE_USER } from './users.js';

/** Always in an answer, whatever `attributes`/`excludedAttributes` say (RFC 7643 §7 `returned: always`). */
const ALWAYS = new Set(['id', 'schemas']);

/** `name.givenName`, `urn:…:User:department` → the path's parts in lower case (the extension URN as one part). */
function partsOf(path: string): string[] {
  const p = path.trim().toLowerCase();
  const urn = ENTERPRISE_USER.toLowerCase();
  if (p.startsWith(`${urn}:`)) return [urn, ...p.slice(urn.length + 1).split('.')];
  if (p === urn) return [urn];
  return p.replace(/^urn:ietf:params:scim:schemas:core:2\.0:user:/, '').split('.');
}

const list = (v: string | undefined): string[][] => (v ?? '').split(',').map((s) => s.trim()).filter(Boolean).map(partsOf);

function pick(o: Record<string, unknown>, paths: string[][]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) {
    const key = k.toLowerCase();
    const wanted = paths.filter((p) => p[0] === key);
    if (wanted.length === 0) continue;
    if (wanted.some((p) => p.length === 1) || typeof v !== 'object' || v === null || Array.isArray(v)) out[k] = v;
    else out[k] = pick(v as Record<string, unknown>, wanted.map((p) => p.slice(1)));
  }
  return out;
}

function drop(o: Record<string, unknown>, paths: string[][]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) {
    const key = k.toLowerCase();
    const hit = paths.filter((p) => p[0] === key);
    if (hit.some((p) => p.length === 1)) continue;
    if (hit.length > 0 && typeof v === 'object' && v !== null && !Array.isArray(v)) out[k] = drop(v as Record<string, unknown>, hit.map((p) => p.slice(1)));
    else out[k] = v;
  }
  return out;
}

/**
 * `attributes` (only these, plus `id` and `schemas`) or `excludedAttributes` (all but these) of
 * RFC 7644 §3.4.2.5, on one resource; sub-attributes (`name.givenName`) and the enterprise
 * extension's attributes by their URN.
 */
export function project(resource: Record<string, unknown>, attributes: string | undefined, excluded: string | undefined): Record<string, unknown> {
  const only = list(attributes);
  if (only.length > 0) {
    const picked = pick(resource, only);
    for (const k of ALWAYS) if (resource[k] !== undefined) picked[k] = resource[k];
    return picked;
  }
  const without = list(excluded).filter((p) => !(p.length === 1 && ALWAYS.has(p[0] ?? '')));
  return without.length > 0 ? drop(resource, without) : resource;
}
