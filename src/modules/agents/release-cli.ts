/**
 * `keel release …`: signing agent builds and release-key lists on the operator's machine
 * (docs/decisions.md "Update channel: the reference agent"). Keel's server never holds a private key:
 * it verifies with the public keys of AGENT_RELEASE_PUBLIC_KEYS, and agents pin them at enrolment.
 *
 *   keel release keygen --out <file>       new Ed25519 private key (PKCS#8 PEM, mode 0600, never
 *                                          overwrites); prints the public key (base64 of the raw 32 bytes)
 *   keel release sign --key <file> --file <binary> --version V --component C --os O --arch A
 *                                          prints the build's signature (base64 Ed25519 over its
 *                                          canonical manifest entry; SHA-256 and size read from the file)
 *   keel release sign-keys --key <file> --keys <k1,k2,…>
 *                                          prints the key-list statement's signature (two-phase rotation)
 *
 * These commands read no configuration and open no database. Imported by src/main.ts only for
 * `keel release`.
 */
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { createReadStream, readFileSync, statSync, writeFileSync } from 'node:fs';
import { keyListStatement, manifestEntry, parseReleaseKey, signText } from './signing.js';

/** A wrong command line: main.ts prints it with the usage and exits 2 (it reads the name). */
class UsageError extends Error {
  override name = 'UsageError';
}

/** A failure meant for the operator as it is (main.ts prints the line and exits 1). */
export class ReleaseCommandError extends Error {
  override name = 'ReleaseCommandError';
}

const OPTIONS: Record<string, readonly string[]> = {
  keygen: ['--out'],
  sign: ['--key', '--file', '--version', '--component', '--os', '--arch'],
  'sign-keys': ['--key', '--keys'],
};

/** `--name value` or `--name=value`; every option of the subcommand is required, none twice. */
function options(sub: string, args: string[]): Map<string, string> {
  const allowed = OPTIONS[sub] ?? [];
  const values = new Map<string, string>();
  const queue = [...args];
  for (let arg = queue.shift(); arg !== undefined; arg = queue.shift()) {
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    if (!allowed.includes(name)) {
      throw new UsageError(name.startsWith('-') ? `unknown option ${quote(name)} for release ${sub}` : `unexpected argument ${quote(arg)} for release ${sub}`);
    }
    const value = eq > 0 ? arg.slice(eq + 1) : queue.shift();
    if (value === undefined || value === '' || (eq < 0 && value.startsWith('--'))) throw new UsageError(`${name} needs a value`);
    if (values.has(name)) throw new UsageError(`${name} is given twice`);
    values.set(name, value);
  }
  const missing = allowed.filter((o) => !values.has(o));
  if (missing.length > 0) throw new UsageError(`release ${sub}: ${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} required`);
  return values;
}

function quote(arg: string): string {
  const clean = arg.replace(/[\u0000-\u001f\u007f]/g, '?'); // eslint-disable-line no-control-regex
  return `"${clean.length > 60 ? `${clean.slice(0, 57)}...` : clean}"`;
}

const errno = (err: unknown): string => (err as NodeJS.ErrnoException).code ?? (err as Error).message;

function privateKey(path: string): KeyObject {
  let pem: string;
  try {
    pem = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ReleaseCommandError(`cannot read the key file ${quote(path)}: ${errno(err)}`);
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch {
    throw new ReleaseCommandError(`the key file ${quote(path)} is not a PEM private key`);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new ReleaseCommandError(`the key file ${quote(path)} holds a ${key.asymmetricKeyType ?? 'unknown'} key, not Ed25519`);
  return key;
}

/** Base64 of the raw 32 bytes of a key's public half. */
function publicBase64(key: KeyObject): string {
  return createPublicKey(key).export({ format: 'der', type: 'spki' }).subarray(12).toString('base64');
}

async function sha256AndSize(path: string): Promise<{ sha256: string; size: number }> {
  try {
    if (!statSync(path).isFile()) throw new ReleaseCommandError(`--file ${quote(path)} is not a file`);
    const hash = createHash('sha256');
    let size = 0;
    for await (const chunk of createReadStream(path)) {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    }
    return { sha256: hash.digest('hex'), size };
  } catch (err) {
    if (err instanceof ReleaseCommandError) throw err;
    throw new ReleaseCommandError(`cannot read --file ${quote(path)}: ${errno(err)}`);
  }
}

/** Runs `keel release <args>`; answers what to print on stdout. */
export async function releaseCommand(args: string[]): Promise<string> {
  const [sub, ...rest] = args;
  if (sub === undefined) throw new UsageError('release needs a subcommand: keygen, sign or sign-keys');
  if (!Object.hasOwn(OPTIONS, sub)) throw new UsageError(`unknown release subcommand ${quote(sub)}`);
  const o = options(sub, rest);
  const get = (name: string): string => o.get(name) as string;
  switch (sub) {
    case 'keygen': {
      const { privateKey: key } = generateKeyPairSync('ed25519');
      try {
        // `wx`: an existing file (perhaps the key every agent pins) is never overwritten.
        writeFileSync(get('--out'), key.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600, flag: 'wx' });
      } catch (err) {
        throw new ReleaseCommandError(`cannot write --out ${quote(get('--out'))}: ${errno(err)}${errno(err) === 'EEXIST' ? ' (an existing key is never overwritten)' : ''}`);
      }
      return `${publicBase64(key)}\n`;
    }
    case 'sign': {
      const key = privateKey(get('--key'));
      const { sha256, size } = await sha256AndSize(get('--file'));
      return `${signText(key, manifestEntry({ version: get('--version'), component: get('--component'), os: get('--os'), arch: get('--arch'), sha256, size }))}\n`;
    }
    default: {
      const key = privateKey(get('--key'));
      const listed = get('--keys').split(',').map((k) => k.trim()).filter((k) => k !== '');
      if (listed.length === 0) throw new UsageError('--keys needs at least one public key');
      const keys = listed.map((k) => {
        try {
          return parseReleaseKey(k);
        } catch {
          throw new ReleaseCommandError(`--keys: ${quote(k)} is not an Ed25519 public key (base64 of the raw 32 bytes)`);
        }
      });
      // Agents accept the statement only when a key they pin signed it; the signer need not stay listed (the drop phase).
      return `${signText(key, keyListStatement(keys))}\n`;
    }
  }
}
