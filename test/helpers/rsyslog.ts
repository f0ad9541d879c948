/**
 * A real rsyslog (the Debian packages `rsyslog` and `rsyslog-gnutls`) of a test's own, on loopback:
 * `imtcp` over TLS (the gtls driver, anonymous clients), with a throwaway CA and server certificate
 * made by the openssl CLI, writing each message it receives (after the octet-counted framing) as one
 * line to a file (`omfile`, template `%rawmsg%`). When rsyslog or its TLS driver is not installed,
 * `rsyslogAvailable()` is false: guard suites with `describe.skipIf(!rsyslogAvailable())`; with
 * REQUIRE_REAL_BACKENDS=1 a missing rsyslog fails the run instead.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { freePort } from './app.js';

const RSYSLOGD = '/usr/sbin/rsyslogd';
const MODULE_DIRS = ['/usr/lib/x86_64-linux-gnu/rsyslog', '/usr/lib/aarch64-linux-gnu/rsyslog', '/usr/lib/rsyslog'];

function installed(): boolean {
  return existsSync(RSYSLOGD) && MODULE_DIRS.some((d) => existsSync(join(d, 'lmnsd_gtls.so')) && existsSync(join(d, 'imtcp.so')));
}

/** True when a test may start rsyslog; throws under REQUIRE_REAL_BACKENDS=1 when it is missing. */
export function rsyslogAvailable(): boolean {
  const ok = installed();
  if (!ok && process.env.REQUIRE_REAL_BACKENDS === '1') throw new Error('rsyslog with its gtls driver is required (REQUIRE_REAL_BACKENDS=1): apt-get install rsyslog rsyslog-gnutls');
  return ok;
}

export interface Rsyslog {
  port: number;
  /** The CA that signed the server's certificate (PEM): a stream's `tls.ca`. */
  caPem: string;
  /** The server's certificate and key (PEM), for another loopback TLS server of the test under the same CA. */
  server: { cert: string; key: string };
  /** Every message received so far, one per line (the RFC 5424 message without its frame). */
  lines(): string[];
  /** Kills the daemon (SIGKILL) and waits for it to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same port, appending to the same file. */
  restart(): Promise<void>;
  close(): Promise<void>;
}

const running = new Set<ChildProcess>();
afterAll(() => {
  for (const p of running) p.kill('SIGKILL');
});

function makeCertificates(dir: string): { ca: string; cert: string; key: string } {
  const f = (n: string) => join(dir, n);
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  run(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.pem'), '-days', '2', '-subj', '/CN=Keel test SIEM CA']);
  run(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=127.0.0.1']);
  writeFileSync(f('ext.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  run(['x509', '-req', '-in', f('server.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-out', f('server.pem'), '-days', '2', '-extfile', f('ext.cnf')]);
  return { ca: f('ca.pem'), cert: f('server.pem'), key: f('server.key') };
}

async function listening(port: number, child: ChildProcess, log: () => string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (child.exitCode !== null) throw new Error(`rsyslogd exited (${child.exitCode}): ${log()}`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect({ host: '127.0.0.1', port }, () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`rsyslogd did not listen on ${port}: ${log()}`);
}

export async function startRsyslog(): Promise<Rsyslog> {
  const dir = mkdtempSync(join(tmpdir(), 'keel-rsyslog-'));
  const certs = makeCertificates(dir);
  const port = await freePort();
  const out = join(dir, 'received.log');
  writeFileSync(out, '');
  const conf = join(dir, 'rsyslog.conf');
  writeFileSync(
    conf,
    [
      `global(workDirectory="${dir}" maxMessageSize="256k" defaultNetstreamDriver="gtls"`,
      `  defaultNetstreamDriverCAFile="${certs.ca}" defaultNetstreamDriverCertFile="${certs.cert}" defaultNetstreamDriverKeyFile="${certs.key}")`,
      'module(load="imtcp" streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="anon")',
      `input(type="imtcp" port="${port}" address="127.0.0.1")`,
      'template(name="raw" type="string" string="%rawmsg%\\n")',
      `action(type="omfile" file="${out}" template="raw" flushOnTXEnd="on")`,
      '',
    ].join('\n'),
  );
  let child: ChildProcess;
  let stderr = '';
  const start = async (): Promise<void> => {
    stderr = '';
    child = spawn(RSYSLOGD, ['-n', '-f', conf, '-i', join(dir, 'rsyslogd.pid')], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout?.on('data', (b: Buffer) => (stderr += b.toString()));
    child.stderr?.on('data', (b: Buffer) => (stderr += b.toString()));
    running.add(child);
    await listening(port, child, () => stderr);
  };
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGKILL');
    await exited;
    running.delete(child);
  };
  await start();
  return {
    port,
    caPem: readFileSync(certs.ca, 'utf8'),
    server: { cert: readFileSync(certs.cert, 'utf8'), key: readFileSync(certs.key, 'utf8') },
    lines: () => readFileSync(out, 'utf8').split('\n').filter((l) => l !== ''),
    stop,
    restart: start,
    async close() {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
