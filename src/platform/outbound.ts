import { lookup as dnsLookup } from 'node:dns/promises';
import type { LookupAddress, LookupOptions } from 'node:dns';
import ipaddr from 'ipaddr.js';
import { Agent, request } from 'undici';

/**
 * The one way Keel calls a URL someone configured (webhook receivers, OIDC issuers, release hosts):
 * SPEC 4.5's target rules, checked when the URL is saved (`vetTarget`) and again on every request
 * (`outboundRequest`), which also connects only to addresses that pass, at connect time, so a name
 * that resolves to a public address when checked and to a private one a moment later (DNS
 * rebinding) is refused. Redirects are not followed; each attempt has one overall deadline and a
 * cap on the answer's size.
 *
 * `allowInsecure` (ALLOW_INSECURE_TARGETS, refused in production) lets `http://` and loopback
 * through, for a local receiver or IdP in development and tests. Private ranges stay refused.
 */

export type OutboundErrorCode = 'invalid_url' | 'insecure_url' | 'blocked_host' | 'blocked_address' | 'unresolvable' | 'timeout' | 'too_large' | 'network';

export class OutboundError extends Error {
  constructor(
    readonly code: OutboundErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'OutboundError';
  }
}

/** Resolves a host name to all its addresses (dns.lookup by default; tests pass their own). */
export type Resolver = (hostname: string) => Promise<LookupAddress[]>;

export interface OutboundPolicy {
  allowInsecure: boolean;
  resolve?: Resolver;
}

const systemResolver: Resolver = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/*
 * Blocked ranges (SPEC 4.5: private, loopback and link-local; RFC 1918, 6598, 5737 and the IPv6
 * equivalents), plus addresses no receiver has: unspecified, multicast, reserved, benchmarking,
 * documentation. ipaddr.js parses; this table decides, because ipaddr.js calls some of these
 * "unicast". IPv6 forms that carry an IPv4 address (mapped, NAT64, 6to4) are judged by that address.
 */
const BLOCKED_V4 = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '169.254.0.0/16', '172.16.0.0/12', '192.0.0.0/24', '192.0.2.0/24',
  '192.88.99.0/24', '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24', '224.0.0.0/4', '240.0.0.0/4',
].map((c) => ipaddr.IPv4.parseCIDR(c));
const LOOPBACK_V4 = ipaddr.IPv4.parseCIDR('127.0.0.0/8');
const BLOCKED_V6 = [
  '::/128', '100::/64', '2001::/32', '2001:db8::/32', 'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8',
].map((c) => ipaddr.IPv6.parseCIDR(c));
const LOOPBACK_V6 = ipaddr.IPv6.parseCIDR('::1/128');
const NAT64 = ipaddr.IPv6.parseCIDR('64:ff9b::/96');
const SIX_TO_FOUR = ipaddr.IPv6.parseCIDR('2002::/16');

/** Why an address may not be dialled, or null when it may. */
export function addressBlocked(address: string, allowInsecure: boolean): string | null {
  let ip: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    ip = ipaddr.parse(address);
  } catch {
    return 'not an IP address';
  }
  if (ip.kind() === 'ipv6') {
    const v6 = ip as ipaddr.IPv6;
    if (v6.isIPv4MappedAddress()) return addressBlocked(v6.toIPv4Address().toString(), allowInsecure);
    const bytes = v6.toByteArray();
    if (v6.match(NAT64)) return addressBlocked(bytes.slice(12).join('.'), allowInsecure);
    if (v6.match(SIX_TO_FOUR)) return addressBlocked(bytes.slice(2, 6).join('.'), allowInsecure);
    if (v6.match(LOOPBACK_V6)) return allowInsecure ? null : 'loopback';
    return BLOCKED_V6.some((r) => v6.match(r)) ? 'private, link-local or reserved' : null;
  }
  const v4 = ip as ipaddr.IPv4;
  if (v4.match(LOOPBACK_V4)) return allowInsecure ? null : 'loopback';
  return BLOCKED_V4.some((r) => v4.match(r)) ? 'private, link-local or reserved' : null;
}

function hostBlocked(hostname: string, allowInsecure: boolean): boolean {
  const host = hostname.toLowerCase().replace(/\.$/, '');
  if (host.endsWith('.local')) return true;
  const loopbackName = host === 'localhost' || host.endsWith('.localhost');
  return loopbackName && !allowInsecure;
}

/** The addresses `hostname` resolves to, every one of them allowed; throws the OutboundError otherwise. */
async function vettedAddresses(hostname: string, policy: OutboundPolicy): Promise<LookupAddress[]> {
  let addresses: LookupAddress[];
  try {
    addresses = await (policy.resolve ?? systemResolver)(hostname);
  } catch {
    throw new OutboundError('unresolvable', `${hostname} does not resolve`);
  }
  if (addresses.length === 0) throw new OutboundError('unresolvable', `${hostname} does not resolve`);
  for (const a of addresses) {
    const why = addressBlocked(a.address, policy.allowInsecure);
    if (why) throw new OutboundError('blocked_address', `${hostname} resolves to a ${why} address`);
  }
  return addresses;
}

export interface VettedTarget {
  url: URL;
  /** The addresses that passed (the literal itself for an IP address). */
  addresses: string[];
}

/** Checks a target URL by SPEC 4.5's rules, resolving its host name; throws an OutboundError saying why not. */
export async function vetTarget(raw: string, policy: OutboundPolicy): Promise<VettedTarget> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new OutboundError('invalid_url', 'not a URL');
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && policy.allowInsecure)) {
    throw new OutboundError(url.protocol === 'http:' ? 'insecure_url' : 'invalid_url', 'the URL must use https');
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  if (ipaddr.isValid(host)) {
    const why = addressBlocked(host, policy.allowInsecure);
    if (why) throw new OutboundError('blocked_address', `the address is ${why}`);
    return { url, addresses: [host] };
  }
  if (hostBlocked(host, policy.allowInsecure)) throw new OutboundError('blocked_host', `${host} is not allowed`);
  return { url, addresses: (await vettedAddresses(host, policy)).map((a) => a.address) };
}

type LookupCallback = (err: Error | null, address: string | LookupAddress[], family?: number) => void;

/** One connection pool per policy; its `lookup` is where the addresses are checked at connect time. */
const agents = new WeakMap<OutboundPolicy, Agent>();

function agentFor(policy: OutboundPolicy): Agent {
  let agent = agents.get(policy);
  if (!agent) {
    const lookup = (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
      vettedAddresses(hostname, policy).then(
        (addresses) => {
          const [first] = addresses;
          if (options.all) callback(null, addresses);
          else if (first) callback(null, first.address, first.family);
        },
        (err: unknown) => callback(err instanceof Error ? err : new Error(String(err)), ''),
      );
    };
    agent = new Agent({ connect: { lookup }, keepAliveTimeout: 10_000 });
    agents.set(policy, agent);
  }
  return agent;
}

export interface OutboundInit {
  method?: 'GET' | 'POST' | 'PUT';
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Deadline of the whole attempt: connecting, sending, waiting and reading the answer. */
  timeoutMs: number;
  /** The most of the answer's body kept; more is an error. */
  maxResponseBytes: number;
}

export interface OutboundResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** One request to a target that passes `vetTarget` now, dialling only vetted addresses; no redirect is followed. */
export async function outboundRequest(raw: string, init: OutboundInit, policy: OutboundPolicy): Promise<OutboundResponse> {
  const { url } = await vetTarget(raw, policy);
  const signal = AbortSignal.timeout(init.timeoutMs);
  try {
    const res = await request(url, {
      dispatcher: agentFor(policy),
      method: init.method ?? 'POST',
      headers: init.headers ?? {},
      body: init.body ?? null,
      signal,
    });
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      const buf = chunk as Buffer;
      size += buf.length;
      if (size > init.maxResponseBytes) {
        res.body.destroy();
        throw new OutboundError('too_large', `the answer is larger than ${init.maxResponseBytes} bytes`);
      }
      chunks.push(buf);
    }
    return { status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) };
  } catch (err) {
    if (err instanceof OutboundError) throw err;
    const cause = (err as { cause?: unknown }).cause;
    if (cause instanceof OutboundError) throw cause;
    if (signal.aborted) throw new OutboundError('timeout', `no complete answer within ${init.timeoutMs} ms`);
    throw new OutboundError('network', (err as Error).message);
  }
}
