import { verify } from 'node:crypto';
import { z } from 'zod';
import type { Keel } from '../../keel.js';
import { AppError, notFound } from '../../platform/http/errors.js';
import { parseReleaseKey } from '../../platform/release-signing.js';
import { OutboundError, outboundRequest } from '../../platform/outbound.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { compareVersions, COMPONENTS, isPrerelease } from './decision.js';
import type { Principal } from '../identity/principal.js';
import { autoPromote, checkReleaseUrl, platformName, registerBuilds, type BuildInput } from './releases.js';
import { agentsError } from './errors.js';

/** `POST /agent-versions/sync-remote`: the release host's signed manifest (docs/decisions.md, README). */

const Asset = z.object({
  component: z.enum(COMPONENTS),
  os: z.string().min(1).max(50),
  arch: z.string().min(1).max(50),
  url: z.string().min(1).max(2000),
  sha256: z.string().regex(/^[0-9a-fA-F]{64}$/),
  size: z.number().int().positive(),
  signature: z.string().max(200).optional(),
});
const Manifest = z.object({ releases: z.array(z.object({ version: z.string().min(1).max(64), assets: z.array(Asset).min(1) })) });


async function fetchBytes(keel: Keel, url: string, max: number): Promise<Buffer> {
  try {
    const res = await outboundRequest(url, { method: 'GET', timeoutMs: 30_000, maxResponseBytes: max }, keel.outbound);
    if (res.status !== 200) throw agentsError('release_host_error', { message: `The release host answered ${res.status} for ${new URL(url).pathname}` });
    return res.body;
  } catch (err) {
    if (err instanceof OutboundError) throw agentsError('release_host_unreachable', { message: `The release host could not be reached: ${err.code}` });
    throw err;
  }
}

/**
 * Fetches `<AGENT_RELEASE_URL>/manifest.json` and its detached Ed25519 signature `manifest.json.sig`
 * (base64 of the 64-byte signature over the exact bytes of manifest.json), verifies it with
 * AGENT_RELEASE_PUBLIC_KEY (no key: refused, whatever NODE_ENV says), picks the named version or the
 * latest stable one, registers every asset and (AGENT_AUTO_PROMOTE) promotes it.
 */
export async function syncRemote(keel: Keel, version: string | undefined, info: AuditRequestInfo, caller: Pick<Principal, 'kind' | 'sessionId' | 'mfa'>) {
  const base = keel.config.AGENT_RELEASE_URL;
  if (!base) throw agentsError('release_host_unconfigured');
  if (!keel.config.AGENT_RELEASE_PUBLIC_KEY) throw agentsError('release_key_missing');
  const key = parseReleaseKey(keel.config.AGENT_RELEASE_PUBLIC_KEY).key;
  const root = base.endsWith('/') ? base : `${base}/`;
  const manifestUrl = new URL('manifest.json', root).toString();
  const body = await fetchBytes(keel, manifestUrl, 1024 * 1024);
  let signature: Buffer;
  try {
    signature = Buffer.from((await fetchBytes(keel, `${manifestUrl}.sig`, 1024)).toString('utf8').trim(), 'base64');
  } catch (err) {
    if (err instanceof AppError && err.code === 'release_host_error') throw agentsError('manifest_signature_invalid', { message: 'The release manifest is not signed' });
    throw err;
  }
  if (signature.length !== 64 || !verify(null, body, key, signature)) {
    await writeAudit(keel.db, info, { action: 'agent.version.sync', result: 'failure', details: { reason: 'signature' } });
    throw agentsError('manifest_signature_invalid');
  }
  let manifest: z.infer<typeof Manifest>;
  try {
    manifest = Manifest.parse(JSON.parse(body.toString('utf8')));
  } catch {
    throw agentsError('manifest_invalid');
  }
  const release = version
    ? manifest.releases.find((r) => r.version === version)
    : manifest.releases.filter((r) => !isPrerelease(r.version)).sort((a, b) => compareVersions(b.version, a.version))[0];
  if (!release) throw notFound(version ? `Release ${version}` : 'Stable release');
  const builds: BuildInput[] = release.assets.map((a) => ({
    version: release.version, component: a.component, os: a.os, arch: a.arch, url: new URL(a.url, root).toString(), sha256: a.sha256.toLowerCase(), size: a.size, filePath: null, signature: a.signature,
  }));
  for (const b of builds) checkReleaseUrl(keel, b.url ?? '');
  const rows = await registerBuilds(keel, builds, info, 'agent.version.sync');
  const promoted = await autoPromote(keel, release.version, builds.map((b) => b.component), info, caller);
  return { version: release.version, synced: rows.map(platformName).sort(), ...promoted };
}
