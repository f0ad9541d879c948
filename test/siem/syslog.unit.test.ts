/**
 * The syslog side of audit streams (docs/decisions.md "Audit streaming"): the URL forms taken, the RFC
 * 5424 message (structured-data values escaped), RFC 6587 octet counting in bytes, and the outbound
 * guard in front of the socket (plain syslog:// and loopback only where insecure targets are allowed).
 */
import { describe, expect, it } from 'vitest';
import { octetCounted, parseSyslogUrl, sendSyslog, syslogMessage } from '../../src/modules/siem/syslog.js';
import type { StreamEntry } from '../../src/modules/siem/entries.js';

const entry: StreamEntry = {
  id: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e90', createdAt: '2026-11-27T23:00:00.000Z', chainSeq: 7, prevHash: '0'.repeat(64), hash: 'a'.repeat(64),
  actorType: 'user', actorId: null, actorEmail: 'zoë@example.com', partnerId: null, orgId: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e91',
  action: 'odd"ac]t\\ion', targetType: null, targetId: null, changes: null, details: { n: 'é' }, result: 'failure', ipAddress: null, userAgent: null,
  requestId: null, scopeId: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e91',
};

describe('audit streams: syslog', () => {
  it('takes syslog+tls://host:port and syslog://host:port only', () => {
    expect(parseSyslogUrl('syslog+tls://siem.example.com:6514')).toEqual({ host: 'siem.example.com', port: 6514, tls: true });
    expect(parseSyslogUrl('syslog://[::1]:514')).toEqual({ host: '::1', port: 514, tls: false });
    for (const bad of ['https://siem.example.com', 'syslog+tls://siem.example.com', 'syslog+tls://u:p@siem.example.com:6514', 'syslog+tls://siem.example.com:6514/x', 'nonsense']) {
      expect(typeof parseSyslogUrl(bad), bad).toBe('string');
    }
  });

  it('an RFC 5424 message: priority by result, structured data escaped, the entry as JSON after a BOM; framed by its length in bytes', () => {
    const msg = syslogMessage(entry, 'keel.example.com');
    expect(msg.startsWith('<108>1 2026-11-27T23:00:00.000Z keel.example.com keel - audit [keel@32473 id="01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e90" seq="7" action="odd\\"ac\\]t\\\\ion" orgId="01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e91" hash="')).toBe(true);
    expect(msg).not.toContain('partnerId="');
    const json = JSON.parse(msg.slice(msg.indexOf('\uFEFF') + 1)) as Record<string, unknown>;
    expect(Object.keys(json)[0]).toBe('id');
    expect(json).not.toHaveProperty('scopeId');
    expect(json.details).toEqual({ n: 'é' });
    expect(syslogMessage({ ...entry, result: 'success' }, 'h').startsWith('<110>1 ')).toBe(true);
    const frame = octetCounted(msg);
    const space = frame.indexOf(0x20);
    expect(Number(frame.subarray(0, space).toString())).toBe(frame.length - space - 1);
    expect(Number(frame.subarray(0, space).toString())).toBeGreaterThan(msg.length);
  });

  it('the outbound guard: plain syslog:// and a loopback address are refused unless insecure targets are allowed', async () => {
    const opts = { policy: { allowInsecure: false }, ca: null, timeoutMs: 2000 };
    await expect(sendSyslog({ host: 'siem.example.com', port: 514, tls: false }, [], opts)).rejects.toMatchObject({ code: 'insecure_url' });
    await expect(sendSyslog({ host: '127.0.0.1', port: 6514, tls: true }, [], opts)).rejects.toMatchObject({ code: 'blocked_address' });
    await expect(sendSyslog({ host: '10.1.2.3', port: 6514, tls: true }, [], { ...opts, policy: { allowInsecure: true } })).rejects.toMatchObject({ code: 'blocked_address' });
    const resolve = () => Promise.resolve([{ address: '192.168.1.5', family: 4 }]);
    await expect(sendSyslog({ host: 'siem.example.com', port: 6514, tls: true }, [], { ...opts, policy: { allowInsecure: false, resolve } })).rejects.toMatchObject({ code: 'blocked_address' });
  });
});
