/**
 * A tiny DNS server on 127.0.0.1 (UDP) answering TXT questions from a map the test edits, for the
 * verified-domains tests (configure the app with `DNS_RESOLVER: dns.address`). A name in `txt` gets
 * its records (an empty list: NOERROR without answers, which node reads as ENODATA); a name in
 * `servfail` gets SERVFAIL (no usable answer); any other name NXDOMAIN (ENOTFOUND).
 */
import { createSocket, type RemoteInfo } from 'node:dgram';

export interface DnsServer {
  /** `127.0.0.1:<port>`, for DNS_RESOLVER. */
  address: string;
  txt: Map<string, string[]>;
  servfail: Set<string>;
  /** Names asked, in order (lower case). */
  asked: string[];
  close(): Promise<void>;
}

function readName(msg: Buffer, offset: number): { name: string; end: number } {
  const labels: string[] = [];
  let i = offset;
  for (;;) {
    const len = msg[i];
    if (len === undefined) throw new Error('truncated name');
    if (len === 0) return { name: labels.join('.'), end: i + 1 };
    if ((len & 0xc0) !== 0) throw new Error('compressed name in a question');
    labels.push(msg.subarray(i + 1, i + 1 + len).toString('latin1'));
    i += 1 + len;
  }
}

function txtRdata(values: string[]): Buffer {
  const parts: Buffer[] = [];
  for (const v of values) {
    const bytes = Buffer.from(v, 'utf8');
    // One record of character-strings of at most 255 bytes each (RFC 1035 3.3.14).
    for (let i = 0; i < bytes.length || i === 0; i += 255) {
      const chunk = bytes.subarray(i, i + 255);
      parts.push(Buffer.from([chunk.length]), chunk);
      if (bytes.length === 0) break;
    }
  }
  return Buffer.concat(parts);
}

export function dnsAnswer(query: Buffer, server: Pick<DnsServer, 'txt' | 'servfail'>): { answer: Buffer; name: string } {
  const { name, end } = readName(query, 12);
  const qtype = query.readUInt16BE(end);
  const question = query.subarray(12, end + 4);
  const key = name.toLowerCase();
  const records = server.txt.get(key);
  const rcode = server.servfail.has(key) ? 2 : records === undefined ? 3 : 0;
  const answers = rcode === 0 && qtype === 16 ? (records ?? []) : [];
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // id
  const rd = (query[2] ?? 0) & 0x01;
  header.writeUInt16BE(0x8000 | (rd << 8) | 0x0080 | rcode, 2); // QR, RD copied, RA, rcode
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(answers.length, 6);
  const rrs = answers.map((value) => {
    const rdata = txtRdata([value]);
    const rr = Buffer.alloc(12);
    rr.writeUInt16BE(0xc00c, 0); // the question's name
    rr.writeUInt16BE(16, 2); // TXT
    rr.writeUInt16BE(1, 4); // IN
    rr.writeUInt32BE(60, 6);
    rr.writeUInt16BE(rdata.length, 10);
    return Buffer.concat([rr, rdata]);
  });
  return { answer: Buffer.concat([header, question, ...rrs]), name: key };
}

export async function startDnsServer(): Promise<DnsServer> {
  const socket = createSocket('udp4');
  const server: DnsServer = {
    address: '',
    txt: new Map(),
    servfail: new Set(),
    asked: [],
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
  socket.on('message', (msg: Buffer, from: RemoteInfo) => {
    try {
      const { answer, name } = dnsAnswer(msg, server);
      server.asked.push(name);
      socket.send(answer, from.port, from.address);
    } catch {
      // A malformed question gets no answer.
    }
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  server.address = `127.0.0.1:${socket.address().port}`;
  return server;
}
