import type { Config } from '../../config.js';
import { keyListStatement, parseReleaseKey, parseReleaseKeys, type ReleaseKey } from './signing.js';

/**
 * The release keys Keel trusts (docs/decisions.md "Update channel: release writes and signatures"):
 * AGENT_RELEASE_PUBLIC_KEYS plus AGENT_RELEASE_PUBLIC_KEY (the manifest key of sync-remote, one more
 * trusted key), deduplicated; and the signed key list of a two-phase rotation (AGENT_RELEASE_KEYS_SIGNATURE).
 */
export interface TrustedReleaseKeys {
  keys: ReleaseKey[];
  /** Base64 of the raw keys, sorted: what the enrolment answer pins and the key-list statement covers. */
  pinned: string[];
  /** The heartbeat's `releaseKeys`: the sorted list and the operator's signature over keyListStatement, or null. */
  statement: { keys: string[]; signature: string } | null;
}

const cache = new WeakMap<Config, TrustedReleaseKeys>();

export function releaseKeysOf(config: Config): TrustedReleaseKeys {
  const hit = cache.get(config);
  if (hit) return hit;
  const keys = parseReleaseKeys(config.AGENT_RELEASE_PUBLIC_KEYS);
  if (config.AGENT_RELEASE_PUBLIC_KEY) {
    const manifestKey = parseReleaseKey(config.AGENT_RELEASE_PUBLIC_KEY);
    if (!keys.some((k) => k.id === manifestKey.id)) keys.push(manifestKey);
  }
  const pinned = (JSON.parse(keyListStatement(keys)) as { keys: string[] }).keys;
  const signature = config.AGENT_RELEASE_KEYS_SIGNATURE;
  const value: TrustedReleaseKeys = { keys, pinned, statement: signature && keys.length > 0 ? { keys: pinned, signature } : null };
  cache.set(config, value);
  return value;
}
