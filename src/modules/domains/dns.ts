import { promises as dns } from 'node:dns';
import type { Keel } from '../../keel.js';
import type { Limit } from '../../platform/rate-limit.js';
import type { InvalidatedCache } from '../../platform/cache.js';

/** What a TXT lookup of a domain found: its records, none (the name or its TXT records do not exist), or no answer. */
export type TxtAnswer = { kind: 'records'; values: string[] } | { kind: 'none' } | { kind: 'error'; code: string };

/** Codes of `node:dns` that mean "the DNS answered: there is no such record", as opposed to "no answer". */
const NO_RECORD = new Set(['ENOTFOUND', 'ENODATA', 'NXDOMAIN']);

/** The domains module's handle (installed by service.ts `installDomains`). */
export interface Domains {
  resolver: dns.Resolver;
  /** Verification attempts (DOMAIN_VERIFY_LIMIT a minute). */
  verifyLimit: Limit;
  /** The organisation whose verified domain covers an email's domain, by that domain (service.ts `cachedVerifiedDomainOrg`). */
  verifiedOrgs: InvalidatedCache<string | null>;
}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    domains: Domains;
  }
}

/**
 * The resolver of a process: `DNS_RESOLVER` (an IP address with an optional port, e.g. a loopback
 * server in tests) or the system's servers. A few seconds per lookup, two tries.
 */
export function createResolver(keel: Keel): dns.Resolver {
  const r = new dns.Resolver({ timeout: 2_000, tries: 2 });
  if (keel.config.DNS_RESOLVER) r.setServers([keel.config.DNS_RESOLVER]);
  return r;
}

const resolverOf = (keel: Keel): dns.Resolver => keel.modules.get('domains').resolver;

/** The TXT records of `domain` (each record's strings joined, as RFC 7208 reads them). Never throws. */
export async function lookupTxt(keel: Keel, domain: string): Promise<TxtAnswer> {
  try {
    const records = await resolverOf(keel).resolveTxt(domain);
    return { kind: 'records', values: records.map((chunks) => chunks.join('')) };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'EDNS';
    return NO_RECORD.has(code) ? { kind: 'none' } : { kind: 'error', code };
  }
}
