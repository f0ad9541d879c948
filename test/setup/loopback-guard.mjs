/**
 * No test resolves or connects outside loopback (docs/testing.md "Network"). This guard wraps the
 * places a Node process reaches the network by name or address:
 *
 * - `dns.lookup` / `dns.promises.lookup` (getaddrinfo: the system resolver), which `net.connect`,
 *   undici, pg and ioredis use for host names;
 * - `dns.resolve*` and `Resolver#resolve*` (c-ares), allowed only while every server they would ask
 *   is on loopback (a test's own DNS server);
 * - `net.Socket#connect` to an IP address (a name goes through the lookup above).
 *
 * Loopback names (`localhost`, `*.localhost`) and addresses (127/8, ::1, and the unspecified
 * 0.0.0.0 / ::, which dial this machine) pass. Names under `.invalid` (RFC 6761: never resolvable)
 * are answered ENOTFOUND here without asking anyone, which is what a resolver would say. Anything
 * else is a violation: the operation fails as an unreachable name or address would, and
 * `onViolation` is told (the test worker fails the test; a child process prints a line).
 *
 * Used by vitest (`test/setup/loopback-guard.ts`, a setup file of both projects) and, through
 * `NODE_OPTIONS=--import`, by every `keel` child process the tests start (`test/helpers/cli.ts`).
 */
import dns from 'node:dns';
import net from 'node:net';
import { syncBuiltinESMExports } from 'node:module';

const LOOPBACK_NAME = /^(localhost|[a-z0-9.-]+\.localhost)\.?$/i;
const INVALID_NAME = /(^|\.)invalid\.?$/i;

/** Whether an IP address literal is on this machine (loopback or unspecified). */
export function isLocalAddress(ip) {
  const a = ip.replace(/^\[|\]$/g, '').toLowerCase();
  if (net.isIPv4(a)) return a.startsWith('127.') || a === '0.0.0.0';
  if (net.isIPv6(a)) {
    if (a === '::1' || a === '::') return true;
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
    return mapped ? isLocalAddress(mapped[1]) : false;
  }
  return false;
}

/** Whether a host (a name or an address literal) may be reached by a test. */
export function isLocalHost(host) {
  return net.isIP(host.replace(/^\[|\]$/g, '')) ? isLocalAddress(host) : LOOPBACK_NAME.test(host);
}

function notFound(host, syscall = 'getaddrinfo') {
  const err = new Error(`${syscall} ENOTFOUND ${host}`);
  err.code = 'ENOTFOUND';
  err.errno = -3008;
  err.syscall = syscall;
  err.hostname = host;
  return err;
}

const RESOLVE_METHODS = ['resolve', 'resolve4', 'resolve6', 'resolveAny', 'resolveCaa', 'resolveCname', 'resolveMx', 'resolveNaptr', 'resolveNs', 'resolvePtr', 'resolveSoa', 'resolveSrv', 'resolveTxt', 'reverse'];

let installed = false;

/** Installs the guard once per process; `onViolation(message)` is called for each refused reach. */
export function installLoopbackGuard(onViolation) {
  if (installed) return;
  installed = true;

  // A name is refused (as ENOTFOUND) unless it is local or an IP literal (no query is made for those).
  const refusal = (host) => {
    if (typeof host !== 'string' || host === '' || net.isIP(host) || LOOPBACK_NAME.test(host)) return null;
    if (INVALID_NAME.test(host)) return notFound(host);
    onViolation(`a lookup of "${host}" (only loopback names may be resolved in tests)`);
    return notFound(host);
  };

  const lookup = dns.lookup;
  dns.lookup = function guardedLookup(host, options, callback) {
    const cb = typeof options === 'function' ? options : callback;
    const err = refusal(host);
    if (err) {
      process.nextTick(() => cb(err));
      return {};
    }
    return lookup.call(this, host, options, callback);
  };
  const promisesLookup = dns.promises.lookup;
  dns.promises.lookup = function guardedPromisesLookup(host, options) {
    const err = refusal(host);
    return err ? Promise.reject(err) : promisesLookup.call(this, host, options);
  };

  // c-ares: only a resolver whose every server is local may ask.
  const guardResolve = (target, serversOf) => {
    for (const name of RESOLVE_METHODS) {
      const original = target[name];
      if (typeof original !== 'function') continue;
      target[name] = function guardedResolve(host, ...rest) {
        const invalid = typeof host === 'string' && INVALID_NAME.test(host);
        const remote = invalid ? undefined : serversOf(this).find((s) => !isLocalAddress(s.replace(/^\[(.*)\](:\d+)?$/, '$1').replace(/^(\d+\.\d+\.\d+\.\d+):\d+$/, '$1')));
        if (invalid || remote !== undefined) {
          if (remote !== undefined) onViolation(`a DNS query (${name} ${String(host)}) to ${remote} (only a loopback DNS server may be asked in tests)`);
          const err = notFound(String(host), `query${name.slice(7)}`);
          const cb = rest.at(-1);
          if (typeof cb !== 'function') return Promise.reject(err);
          process.nextTick(() => cb(err));
          return undefined;
        }
        return original.call(this, host, ...rest);
      };
    }
  };
  guardResolve(dns, () => dns.getServers());
  guardResolve(dns.promises, () => dns.getServers());
  guardResolve(dns.Resolver.prototype, (r) => r.getServers());
  guardResolve(dns.promises.Resolver.prototype, (r) => r.getServers());

  // Connections to an address literal (names were looked up above).
  const connect = net.Socket.prototype.connect;
  net.Socket.prototype.connect = function guardedConnect(...args) {
    const first = args[0];
    const options = Array.isArray(first) ? first[0] : first;
    let host;
    if (options && typeof options === 'object') host = options.path === undefined ? (options.host ?? 'localhost') : undefined;
    else if (typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) host = typeof args[1] === 'string' ? args[1] : 'localhost';
    if (typeof host === 'string' && net.isIP(host.replace(/^\[|\]$/g, '')) && !isLocalAddress(host)) {
      onViolation(`a connection to ${host} (only loopback addresses may be reached in tests)`);
      const err = new Error(`connect ENETUNREACH ${host} (loopback guard)`);
      err.code = 'ENETUNREACH';
      process.nextTick(() => this.destroy(err));
      return this;
    }
    return connect.apply(this, args);
  };

  syncBuiltinESMExports();
}

// A child process started with NODE_OPTIONS=--import=<this file> and KEEL_LOOPBACK_GUARD=child.
if (process.env.KEEL_LOOPBACK_GUARD === 'child') {
  installLoopbackGuard((message) => {
    process.stderr.write(`loopback guard: refused ${message}\n`);
  });
}
