import { lookup as dnsLookup } from 'node:dns/promises';
import type { LookupAddress, LookupOptions } from 'node:dns';
import type { Socket } from 'node:net';
import tls from 'node:tls';
import ipaddr from 'ipaddr.js';
import { Agent, buildConnector, type Dispatcher } from 'undici';
import { activeTracer, childSpan, endWhenSettled, SpanKind } from './tracing/index.js';

/**
 * The one way Keel calls a URL someone configured (webhook receivers, OIDC issuers, release hosts):
 * The target rules of docs/specification.md "Outbound targets", checked when the URL is saved (`vetTarget`) and again on every request
 * (`outboundRequest`), which also connects only to addresses that pass, at connect time, so a name
 * that resolves to a public address when checked and to a private one a moment later (DNS
 * rebinding) is refused. Redirects are not followed; each attempt has one overall deadline and a
 * cap on the answer's size.
 *
 * `allowInsecure` (ALLOW_INSECURE_TARGETS, refused in production) lets `http://` and loopback
 * through, for a local receiver or IdP in development and tests. Private ranges stay refused.
 */

export type OutboundErrorCode =
  | 'invalid_url'
  | 'insecure_url'
  | 'blocked_host'
  | 'blocked_address'
  | 'unresolvable'
  | 'timeout'
  | 'too_large'
  | 'network'
  | 'aborted';

/** The codes that mean "this target may not be called" (as opposed to "it could not be reached"). */
export const UNSAFE_TARGET_CODES: ReadonlySet<OutboundErrorCode> = new Set(['invalid_url', 'insecure_url', 'blocked_host', 'blocked_address']);

export class OutboundError extends Error {
  constructor(
    readonly code: OutboundErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'OutboundError';
  }
}

/**
 * Resolves a host name to all its addresses (dns.lookup by default; tests pass their own). `signal`
 * is the attempt's deadline: a resolver may stop when it fires; the guard stops waiting for it then
 * anyway.
 */
export type Resolver = (hostname: string, signal?: AbortSignal) => Promise<LookupAddress[]>;

export interface OutboundPolicy {
  allowInsecure: boolean;
  resolve?: Resolver;
  /** Extra trusted certificate authorities (PEM), beside the system's: tests with their own HTTPS receivers. */
  ca?: string;
}

const systemResolver: Resolver = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/** How long saving a URL (`vetTarget` without a deadline of its own) may wait for its name to resolve. */
export const VET_TIMEOUT_MS = 10_000;

/*
 * The blocked ranges: the private, loopback and link-local ranges of
 * docs/specification.md "Outbound targets", plus every special-purpose range no receiver lives in). ipaddr.js parses (every IPv4
 * literal form: decimal, octal, hex, short); this table decides, because ipaddr.js calls some of
 * these "unicast".
 *
 * IPv4: 0/8, 10/8, 100.64/10, 127/8 (loopback: allowed with allowInsecure), 169.254/16, 172.16/12,
 * 192.0.0/24, 192.0.2/24, 192.88.99/24, 192.168/16, 198.18/15, 198.51.100/24, 203.0.113/24, 224/4,
 * 240/4 (which holds 255.255.255.255).
 * IPv6: ::/128, ::1 (loopback), ::ffff:0:0/96 (mapped) and ::/96 (compatible) judged by the IPv4
 * address they carry, ::ffff:0:0:0/96 (SIIT), 64:ff9b::/96 and 64:ff9b:1::/48 (NAT64), 100::/64,
 * 2001::/23 (Teredo 2001::/32, 2001:2::/48, ORCHID 2001:10::/28 and 2001:20::/28, …), 2001:db8::/32,
 * 2002::/16 (6to4), 3fff::/20, 5f00::/16, fc00::/7, fec0::/10, fe80::/10, ff00::/8.
 */
const BLOCKED_V4 = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '169.254.0.0/16', '172.16.0.0/12', '192.0.0.0/24', '192.0.2.0/24',
  '192.88.99.0/24', '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24', '224.0.0.0/4', '240.0.0.0/4',
].map((c) => ipaddr.IPv4.parseCIDR(c));
const LOOPBACK_V4 = ipaddr.IPv4.parseCIDR('127.0.0.0/8');
const BLOCKED_V6 = [
  '::/128', '::ffff:0:0:0/96', '64:ff9b::/96', '64:ff9b:1::/48', '100::/64', '2001::/23', '2001:db8::/32', '2002::/16',
  '3fff::/20', '5f00::/16', 'fc00::/7', 'fec0::/10', 'fe80::/10', 'ff00::/8',
].map((c) => ipaddr.IPv6.parseCIDR(c));
const LOOPBACK_V6 = ipaddr.IPv6.parseCIDR('::1/128');
/** IPv6 forms that carry an IPv4 address in their last 32 bits and are judged by it. */
const EMBEDDED_V4 = [ipaddr.IPv6.parseCIDR('::ffff:0:0/96'), ipaddr.IPv6.parseCIDR('::/96')];

/** Why an address may not be dialled, or null when it may. */
export function addressBlocked(address: string, allowInsecure: boolean): string | null {
  let ip: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    ip = ipaddr.parse(address.replace(/^\[(.*)\]$/, '$1'));
  } catch {
    return 'not an IP address';
  }
  if (ip.kind() === 'ipv6') {
    const v6 = ip as ipaddr.IPv6;
    if (v6.match(LOOPBACK_V6)) return allowInsecure ? null : 'loopback';
    if (BLOCKED_V6.some((r) => v6.match(r))) return 'private, link-local or reserved';
    if (EMBEDDED_V4.some((r) => v6.match(r))) return addressBlocked(v6.toByteArray().slice(12).join('.'), allowInsecure);
    return null;
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

const timedOut = (timeoutMs: number) => new OutboundError('timeout', `no complete answer within ${timeoutMs} ms`);

/** `work`, unless `signal` fires first: then the OutboundError `timeout` (whatever `work` does later). */
function beforeDeadline<T>(work: Promise<T>, signal: AbortSignal, timeoutMs: number): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(timedOut(timeoutMs));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(timedOut(timeoutMs));
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}

/** One attempt's deadline, as the code deep inside undici (the connector, its lookup) finds it. */
interface Attempt {
  signal: AbortSignal;
  timeoutMs: number;
}

/*
 * How the connector and its lookup find the attempt that made them dial. undici starts a connection
 * synchronously inside `dispatch()` (Agent → Pool → Client → connector), and Node's net/tls call the
 * lookup synchronously inside `connect()`, so `dialling` is set only for the length of `dispatch()`
 * and both read it there. A connection made at any other moment (a pool reconnecting for a queued
 * request) finds none and gets CONNECT_FALLBACK_MS, while the attempt itself still ends at its own
 * deadline. An AsyncLocalStorage would say the same thing implicitly, but on Node 20 it makes every
 * promise of the process pay for async hooks (platform/request-scope.ts), and so every request once
 * one webhook had been delivered.
 */
let dialling: Attempt | undefined;

/** Runs `start` (which may dial) with `attempt` as the one a new connection belongs to. */
function dialFor<T>(attempt: Attempt, start: () => T): T {
  const outer = dialling;
  dialling = attempt;
  try {
    return start();
  } finally {
    dialling = outer;
  }
}

/** The addresses `hostname` resolves to, every one of them allowed; throws the OutboundError otherwise. */
async function vettedAddresses(hostname: string, policy: OutboundPolicy, attempt: Attempt): Promise<LookupAddress[]> {
  let addresses: LookupAddress[];
  try {
    addresses = await beforeDeadline((policy.resolve ?? systemResolver)(hostname, attempt.signal), attempt.signal, attempt.timeoutMs);
  } catch (err) {
    if (err instanceof OutboundError) throw err;
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

/**
 * Checks a target URL by the rules of docs/specification.md "Outbound targets", resolving its host name; throws an OutboundError saying
 * why not. The name must resolve before `signal` fires (default: VET_TIMEOUT_MS from now).
 */
export async function vetTarget(raw: string, policy: OutboundPolicy, signal?: AbortSignal): Promise<VettedTarget> {
  return vet(raw, policy, signal ? { signal, timeoutMs: VET_TIMEOUT_MS } : { signal: AbortSignal.timeout(VET_TIMEOUT_MS), timeoutMs: VET_TIMEOUT_MS });
}

async function vet(raw: string, policy: OutboundPolicy, attempt: Attempt): Promise<VettedTarget> {
  let url: URL;
  try {
    // The URL parser brings every IPv4 literal form (2130706433, 0177.0.0.1, 0x7f.1, 127.1) to dotted decimal.
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
  return { url, addresses: (await vettedAddresses(host, policy, attempt)).map((a) => a.address) };
}

/**
 * The addresses a host (a name or an IP literal) may be dialled at, by the same rules as `vetTarget`,
 * for callers that open their own socket (the audit stream's syslog over TCP): dial only these, so a
 * name rebound between this check and the connect is never followed. Throws the OutboundError.
 */
export async function vetHost(host: string, policy: OutboundPolicy, timeoutMs: number = VET_TIMEOUT_MS): Promise<string[]> {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  if (ipaddr.isValid(bare)) {
    const why = addressBlocked(bare, policy.allowInsecure);
    if (why) throw new OutboundError('blocked_address', `the address is ${why}`);
    return [bare];
  }
  if (hostBlocked(bare, policy.allowInsecure)) throw new OutboundError('blocked_host', `${bare} is not allowed`);
  return (await vettedAddresses(bare, policy, { signal: AbortSignal.timeout(timeoutMs), timeoutMs })).map((a) => a.address);
}

type LookupCallback = (err: Error | null, address: string | LookupAddress[], family?: number) => void;

/** Without an attempt around it (never on Keel's own paths), a connection may take this long. */
const CONNECT_FALLBACK_MS = 10_000;

/** One connection pool per policy; its connector is where addresses are checked and the deadline holds. */
const agents = new WeakMap<OutboundPolicy, Agent>();

function agentFor(policy: OutboundPolicy): Agent {
  let agent = agents.get(policy);
  if (!agent) {
    // Connect-time resolution: the name is resolved and vetted again, and only what passed is dialled.
    const lookup = (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
      const attempt = dialling ?? { signal: AbortSignal.timeout(CONNECT_FALLBACK_MS), timeoutMs: CONNECT_FALLBACK_MS };
      vettedAddresses(hostname, policy, attempt).then(
        (addresses) => {
          const [first] = addresses;
          if (options.all) callback(null, addresses);
          else if (first) callback(null, first.address, first.family);
        },
        (err: unknown) => callback(err instanceof Error ? err : new Error(String(err)), ''),
      );
    };
    // undici's own connect timeout is off: the attempt's deadline ends the TCP connect and the TLS
    // handshake instead (a server that accepts TCP and never speaks TLS holds nothing past it).
    // undici's connector returns the socket it starts (its type says void).
    const base = buildConnector({ lookup, timeout: 0, ...(policy.ca ? { ca: [...tls.rootCertificates, policy.ca] } : {}) }) as unknown as (options: buildConnector.Options, callback: buildConnector.Callback) => Socket;
    const connect: buildConnector.connector = (options, callback) => {
      const attempt = dialling;
      const signal = attempt?.signal ?? AbortSignal.timeout(CONNECT_FALLBACK_MS);
      let settled = false;
      const settle: buildConnector.Callback = (...args) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener('abort', onAbort);
        callback(...args);
      };
      const socket = base(options, settle);
      function onAbort(): void {
        const err = timedOut(attempt?.timeoutMs ?? CONNECT_FALLBACK_MS);
        socket.destroy(err);
        settle(err, null);
      }
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
      return socket;
    };
    agent = new Agent({ connect, keepAliveTimeout: 10_000 });
    agents.set(policy, agent);
  }
  return agent;
}

export interface OutboundInit {
  method?: 'GET' | 'POST' | 'PUT';
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Deadline of the whole attempt: resolving, connecting (TCP and TLS), sending, waiting and reading the answer. */
  timeoutMs: number;
  /** The most of the answer's body kept; more is an error (or, with `truncate`, the rest is never read). */
  maxResponseBytes: number;
  /**
   * Keep the first `maxResponseBytes` of a larger answer and stop reading (the connection is closed):
   * for callers that only record the answer (webhook deliveries), where a large body is no failure.
   */
  truncate?: boolean;
  /** Ends the attempt early (a worker stopping); the attempt fails as `aborted`. */
  signal?: AbortSignal;
}

export interface OutboundResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  /** True when `truncate` cut the body at `maxResponseBytes`. */
  truncated?: boolean;
}

/**
 * One request to a target that passes `vetTarget` now, dialling only vetted addresses; no redirect
 * is followed. One deadline, started before anything else, covers the whole attempt: the name's
 * resolution for vetting, the connect-time resolution, TCP connect and TLS handshake, the request,
 * the answer's headers and its body.
 */
export function outboundRequest(raw: string, init: OutboundInit, policy: OutboundPolicy): Promise<OutboundResponse> {
  const exchange = new Promise<OutboundResponse>((resolve, reject) => {
    new Exchange(init, resolve, reject).start(raw, policy);
  });
  return activeTracer ? tracedExchange(raw, init, exchange) : exchange;
}

/**
 * A client span of an outbound request inside a trace (docs/deploy.md "Tracing"): the method, the
 * target's host and port and the answer's status, never the path, the query, the headers or the
 * bodies (a webhook URL or an IdP call may carry credentials). No `traceparent` is sent: every
 * target is a third party's (docs/decisions.md "Tracing").
 */
function tracedExchange(raw: string, init: OutboundInit, exchange: Promise<OutboundResponse>): Promise<OutboundResponse> {
  const method = init.method ?? 'POST';
  let host: { hostname: string; port: number } | null = null;
  try {
    const url = new URL(raw);
    host = { hostname: url.hostname, port: Number(url.port || (url.protocol === 'https:' ? 443 : 80)) };
  } catch {
    // an invalid URL fails in the exchange; the span has no host
  }
  const span = childSpan(method, host ? { 'http.request.method': method, 'server.address': host.hostname, 'server.port': host.port } : { 'http.request.method': method }, SpanKind.CLIENT);
  if (!span) return exchange;
  return endWhenSettled(
    span,
    exchange.then((res) => {
      span.setAttribute('http.response.status_code', res.status);
      return res;
    }),
  );
}

/**
 * An attempt's deadline as the resolver and the connector see it: an AbortSignal, made only when one
 * of them asks (a fresh name to resolve, a new connection). An attempt to an address over a kept
 * connection makes none: a controller, its signal and their listeners were a measured part of each
 * webhook delivery.
 */
class Deadline implements Attempt {
  #controller: AbortController | null = null;
  #fired = false;
  constructor(readonly timeoutMs: number) {}
  get signal(): AbortSignal {
    this.#controller ??= new AbortController();
    if (this.#fired) this.#controller.abort();
    return this.#controller.signal;
  }
  fire(): void {
    this.#fired = true;
    this.#controller?.abort();
  }
}

/**
 * One request and its answer, as undici's dispatch handler: the answer's body is collected up to
 * `maxResponseBytes` as it arrives (no stream, no iterator), and the attempt settles once, on the
 * first of: the answer complete, the cap, an error, the deadline's timer, the caller's signal.
 * Whatever undici reports after that is ignored, and the request is aborted (undici then closes the
 * connection).
 */
class Exchange implements Dispatcher.DispatchHandler {
  readonly #init: OutboundInit;
  readonly #resolve: (res: OutboundResponse) => void;
  readonly #reject: (err: OutboundError) => void;
  readonly #deadline: Deadline;
  #timer: NodeJS.Timeout | null = null;
  #controller: Dispatcher.DispatchController | null = null;
  #settled = false;
  #status = 0;
  #headers: Record<string, string | string[] | undefined> = {};
  #chunks: Buffer[] = [];
  #size = 0;

  constructor(init: OutboundInit, resolve: (res: OutboundResponse) => void, reject: (err: OutboundError) => void) {
    this.#init = init;
    this.#resolve = resolve;
    this.#reject = reject;
    this.#deadline = new Deadline(init.timeoutMs);
  }

  start(raw: string, policy: OutboundPolicy): void {
    const { signal } = this.#init;
    if (signal?.aborted) return this.#fail(cancelled());
    this.#timer = setTimeout(this.#onTimeout, this.#init.timeoutMs);
    this.#timer.unref();
    signal?.addEventListener('abort', this.#onCancel, { once: true });
    vet(raw, policy, this.#deadline).then(
      ({ url }) => this.#dispatch(url, policy),
      (err: unknown) => this.#fail(this.#why(err)),
    );
  }

  #dispatch(url: URL, policy: OutboundPolicy): void {
    if (this.#settled) return;
    const { method = 'POST', headers = {}, body = null } = this.#init;
    try {
      dialFor(this.#deadline, () => agentFor(policy).dispatch({ origin: url.origin, path: `${url.pathname}${url.search}`, method, headers, body }, this));
    } catch (err) {
      this.#fail(this.#why(err));
    }
  }

  readonly #onTimeout = (): void => {
    this.#timer = null;
    this.#deadline.fire();
    this.#fail(timedOut(this.#init.timeoutMs));
  };

  readonly #onCancel = (): void => {
    this.#deadline.fire();
    this.#fail(cancelled());
  };

  /** What an error from vetting, the connector or undici means for the caller. */
  #why(err: unknown): OutboundError {
    if (err instanceof OutboundError) return err;
    const cause = (err as { cause?: unknown }).cause;
    if (cause instanceof OutboundError) return cause;
    return new OutboundError('network', err instanceof Error ? err.message : String(err));
  }

  #end(): boolean {
    if (this.#settled) return false;
    this.#settled = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#init.signal?.removeEventListener('abort', this.#onCancel);
    return true;
  }

  #fail(err: OutboundError): void {
    if (!this.#end()) return;
    this.#controller?.abort(err);
    this.#reject(err);
  }

  #answer(truncated: boolean): void {
    if (!this.#end()) return;
    const body = this.#chunks.length === 1 ? (this.#chunks[0] as Buffer) : Buffer.concat(this.#chunks, this.#size);
    this.#resolve(truncated ? { status: this.#status, headers: this.#headers, body, truncated } : { status: this.#status, headers: this.#headers, body });
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    // Settled while the request waited for its connection: it is never written.
    if (this.#settled) controller.abort(new OutboundError('aborted', 'the attempt has ended'));
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.#status = statusCode;
    this.#headers = headers;
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#settled) return;
    const max = this.#init.maxResponseBytes;
    if (this.#size + chunk.length <= max) {
      this.#size += chunk.length;
      this.#chunks.push(chunk);
      return;
    }
    if (!this.#init.truncate) return this.#fail(new OutboundError('too_large', `the answer is larger than ${max} bytes`));
    this.#chunks.push(chunk.subarray(0, max - this.#size));
    this.#size = max;
    this.#answer(true);
    // The rest is never read: the connection is closed.
    controller.abort(new OutboundError('aborted', 'the rest of the answer is not read'));
  }

  onResponseEnd(): void {
    this.#answer(false);
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.#fail(this.#why(err));
  }
}

const cancelled = () => new OutboundError('aborted', 'the attempt was cancelled');
