import net from 'node:net';
import tls from 'node:tls';
import { OutboundError, vetHost, type OutboundPolicy } from '../../platform/outbound.js';
import type { StreamEntry } from './entries.js';
import { entryJson } from './entries.js';

/**
 * Syslog for audit streams (docs/decisions.md "Audit streaming"): RFC 5424 messages over TCP, framed by
 * octet counting (RFC 6587 3.4.1: `<length> <message>`), over TLS unless the URL says `syslog://`
 * (allowed only where insecure targets are: ALLOW_INSECURE_TARGETS). The host passes the outbound
 * guard (`vetHost`) and only the addresses it vetted are dialled.
 */

export interface SyslogTarget {
  host: string;
  port: number;
  tls: boolean;
}

/** `syslog+tls://host:port` (TLS) or `syslog://host:port` (plain TCP); no path, query or credentials. */
export function parseSyslogUrl(raw: string): SyslogTarget | string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'not a URL';
  }
  if (url.protocol !== 'syslog+tls:' && url.protocol !== 'syslog:') return 'a syslog stream takes syslog+tls://host:port (or syslog://host:port where insecure targets are allowed)';
  if (url.username !== '' || url.password !== '') return 'must not carry credentials';
  if ((url.pathname !== '' && url.pathname !== '/') || url.search !== '' || url.hash !== '') return 'takes no path, query or fragment';
  if (!url.hostname) return 'names no host';
  const port = Number(url.port);
  if (!url.port || !Number.isInteger(port) || port < 1 || port > 65535) return 'must name the port (e.g. syslog+tls://siem.example.com:6514)';
  return { host: url.hostname.replace(/^\[(.*)\]$/, '$1'), port, tls: url.protocol === 'syslog+tls:' };
}

/** The structured-data id of Keel's parameters: `keel@32473` (32473: the example enterprise number of RFC 5612). */
export const SD_ID = 'keel@32473';
/** Facility 13 ("log audit"); severity 6 (informational) for a success, 4 (warning) for a failure. */
const priority = (e: StreamEntry): number => 13 * 8 + (e.result === 'failure' ? 4 : 6);

/** An SD-PARAM value: `"`, `\` and `]` escaped (RFC 5424 6.3.3). */
const sdValue = (v: string): string => v.replace(/["\\\]]/g, (c) => `\\${c}`);

/** A HOSTNAME field: printable US-ASCII without spaces, at most 255, `-` when none. */
export function syslogHostname(name: string): string {
  const clean = name.replace(/[^\x21-\x7e]/g, '').slice(0, 255);
  return clean === '' ? '-' : clean;
}

/**
 * One entry as an RFC 5424 message: `<PRI>1 TIMESTAMP HOSTNAME keel - audit [keel@32473 id=… seq=…
 * action=… orgId=… partnerId=… hash=…] BOM<the entry's canonical JSON>`.
 */
export function syslogMessage(e: StreamEntry, hostname: string): string {
  const params: [string, string | null][] = [
    ['id', e.id],
    ['seq', String(e.chainSeq)],
    ['action', e.action],
    ['orgId', e.orgId],
    ['partnerId', e.partnerId],
    ['hash', e.hash],
  ];
  const sd = `[${SD_ID}${params.filter(([, v]) => v !== null).map(([k, v]) => ` ${k}="${sdValue(v ?? '')}"`).join('')}]`;
  return `<${priority(e)}>1 ${e.createdAt} ${hostname} keel - audit ${sd} \uFEFF${entryJson(e)}`;
}

/** RFC 6587 octet counting: the message's length in octets, a space, the message. */
export function octetCounted(message: string): Buffer {
  const body = Buffer.from(message, 'utf8');
  return Buffer.concat([Buffer.from(`${body.length} `, 'ascii'), body]);
}

/**
 * Sends the frames over one connection and closes it; resolves once the receiver has closed its side
 * after reading ours to the end (it took every frame), rejects on any error or at the deadline, so a
 * batch counts as sent only when the whole of it reached the receiver.
 */
export async function sendSyslog(target: SyslogTarget, frames: readonly Buffer[], opts: { policy: OutboundPolicy; ca: string | null; timeoutMs: number }): Promise<void> {
  if (!target.tls && !opts.policy.allowInsecure) throw new OutboundError('insecure_url', 'plain syslog:// is refused: use syslog+tls://');
  const [address] = await vetHost(target.host, opts.policy, opts.timeoutMs);
  if (!address) throw new OutboundError('unresolvable', `${target.host} does not resolve`);
  const servername = net.isIP(target.host) ? undefined : target.host;
  await new Promise<void>((resolve, reject) => {
    const socket: net.Socket = target.tls
      ? tls.connect({ host: address, port: target.port, ...(servername ? { servername } : {}), ...(opts.ca ? { ca: [...tls.rootCertificates, opts.ca] } : {}) })
      : net.connect({ host: address, port: target.port });
    let done = false;
    const finish = (err?: Error): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(() => finish(new OutboundError('timeout', `no complete exchange within ${opts.timeoutMs} ms`)), opts.timeoutMs);
    socket.once('error', (err) => finish(new OutboundError('network', err.message)));
    socket.once(target.tls ? 'secureConnect' : 'connect', () => {
      for (const f of frames) socket.write(f);
      socket.end();
    });
    // The receiver's end of the stream: it read ours to its end and closed.
    socket.once('end', () => finish());
    socket.once('close', () => finish(new OutboundError('network', 'the connection closed before the receiver finished')));
    socket.resume();
  });
}
