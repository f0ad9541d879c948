import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { validationError, zodFields, platformError } from '../../platform/http/errors.js';
import { uploadLimitsOf } from '../../platform/http/middleware.js';
import { errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { documentAccess } from '../../platform/http/route-docs.js';
import { writeAudit } from '../audit/service.js';
import { authenticate } from '../../http/authenticate.js';
import { requestInfo } from '../identity/request.js';
import { accessOf, guard, requireScope } from '../access/scope.js';
import { deviceAuth } from './context.js';
import { ComponentName, Platform, Version } from './api-schemas.js';
import { listVersions, localBuild, promote, registerRemote, registerUpload, resumeRollout, ROLLOUT_STATUSES, widenRollout } from './releases.js';
import { syncRemote } from './sync.js';
import { releaseRefusal, releaseRefused } from './release-writer.js';
import { agentsError } from './errors.js';
import { advanceRollout, MAX_RINGS, MAX_SOAK_MINUTES, RING_STATES } from './rings.js';

const d = (description: string, example?: unknown) => (example === undefined ? { description } : { description, example });

const Build = z
  .object({
    version: z.string().openapi(d('Version')),
    component: ComponentName,
    os: z.string().openapi(d('Operating system')),
    arch: z.string().openapi(d('CPU architecture')),
    url: z.string().openapi(d('Download URL (the release host, or Keel for uploaded builds)')),
    sha256: z.string().openapi(d('SHA-256 of the binary (hex)')),
    size: z.number().int().openapi(d('Size in bytes')),
    source: z.string().openapi(d('local (uploaded to Keel) or remote (release host)')),
    signed: z.boolean().openapi(d('Whether a release key verified the build\'s signature at registration (false: registered without release keys, development only)')),
    keyId: z.string().nullable().openapi(d('Id of the release key that signed the build (first 8 hex of SHA-256 of the raw key), or null')),
    createdAt: z.string().openapi(d('Registration time')),
  })
  .openapi('AgentBuild');

const AutoPromote = z
  .object({
    status: z.enum(['promoted', 'off', 'skipped']).openapi(d('promoted (AGENT_AUTO_PROMOTE, the caller could promote); off (AGENT_AUTO_PROMOTE=false, or the registration said promote=false: reason not_requested); skipped (see reason)')),
    reason: z
      .enum(['mfa_required', 'user_required', 'downgrade', 'not_requested'])
      .nullable()
      .openapi(d('Why it was not promoted: the caller could not promote (mfa_required, user_required), it would be a downgrade, or the registration said promote=false (not_requested)')),
  })
  .openapi('AutoPromote');

const Registered = Build.extend({
  promoted: z.array(z.string()).openapi(d('Platforms promoted at once (AGENT_AUTO_PROMOTE), as component:os/arch')),
  autoPromote: AutoPromote.openapi(d('What AGENT_AUTO_PROMOTE did with this registration')),
}).openapi('AgentBuildRegistered');

const RingStatus = z
  .object({
    ring: z.number().int().openapi(d('Position (1 is offered first)')),
    deviceGroupId: z.string().nullable().openapi(d('The ring\'s device group (null: a group the caller does not see)')),
    name: z.string().nullable().openapi(d('The device group\'s name (null: not seen by the caller, or deleted)')),
    soakMinutes: z.number().int().openapi(d('Minutes the ring soaks after it opens before the next opens')),
    state: z.enum(RING_STATES).openapi(d('waiting (not open yet); soaking (open, the next waits for its soak); done (the next ring, or the rest of the fleet, is open); halted (the rollout halted while this ring soaked, or on its failures)')),
    openedAt: z.string().nullable().openapi(d('When the ring opened (its soak restarts on a resume)')),
    offered: z.number().int().openapi(d('Devices of the group (that the caller sees) offered the version')),
    succeeded: z.number().int().openapi(d('Of those, last report succeeded (since the promote or resume)')),
    failed: z.number().int().openapi(d('Of those, last report failed or rolled_back (since the promote or resume)')),
  })
  .openapi('RolloutRing');

const Rollout = z
  .object({
    percent: z.number().int().openapi(d('Share of devices (stable cohort) offered the version')),
    status: z
      .enum(ROLLOUT_STATUSES)
      .openapi(
        d(
          'halted (too many failed or rolled-back reports; offered to nobody until resumed); failing (failed or rolled-back reports since the promote or resume, and no success: no succeeded report, no device on it); ' +
            'complete (100%, every device on the target platforms that takes updates is on it, no failure); complete_with_failures (the same, but some devices failed or rolled back and wait for a retry); ' +
            'active (anything else: still rolling out, including right after a promote). Decided on the whole fleet',
        ),
      ),
    succeeded: z.number().int().openapi(d('Devices whose last report for this version is succeeded')),
    failed: z.number().int().openapi(d('Devices whose last report for this version is failed or rolled_back')),
    devices: z.number().int().openapi(d('Devices on this version')),
    pending: z.number().int().openapi(d('Devices (that the caller sees) on the target platforms still to update: auto-update on, not blocked')),
    blocked: z.number().int().openapi(d('Devices (that the caller sees) that failed or rolled back this version and are not offered it again until retried (POST /devices/update-now)')),
    rings: z.array(RingStatus).openapi(d('The rings of the promotion, in order (empty: none)')),
  })
  .openapi('Rollout');

const VersionEntry = z
  .object({
    version: z.string().openapi(d('Version')),
    component: ComponentName,
    prerelease: z.boolean().openapi(d('A release candidate (-rc and the like)')),
    builds: z.array(Build).openapi(d('Registered builds of this version and component')),
    deviceCount: z.number().int().openapi(d('Devices the caller sees that run this version of the component')),
    target: z.array(z.string()).openapi(d('Platforms (component:os/arch) whose fleet target this version is')),
    rollout: Rollout.nullable().openapi(d('Rollout state when the version is a target')),
  })
  .openapi('AgentVersion');

const RemoteBody = z
  .object({
    version: Version.openapi(d('Version', '1.5.0')),
    component: ComponentName,
    os: Platform.openapi(d('Operating system', 'linux')),
    arch: Platform.openapi(d('CPU architecture', 'amd64')),
    url: z.string().max(2000).openapi(d('Download URL on the release host (https)', 'https://releases.example.com/1.5.0/agent-linux-amd64')),
    sha256: z.string().regex(/^[0-9a-fA-F]{64}$/, 'must be 64 hex characters').openapi(d('SHA-256 of the binary (hex)')),
    size: z.number().int().positive().openapi(d('Size in bytes', 1048576)),
    signature: z.string().max(200).optional().openapi(d('Ed25519 signature (base64) over the canonical manifest entry {"arch","component","os","sha256","size","version"} (`keel release sign`); required when release keys are configured (400 release_signature_invalid)')),
  })
  .openapi('AgentBuildRemote', { example: { version: '1.5.0', component: 'agent', os: 'linux', arch: 'amd64', url: 'https://releases.example.com/1.5.0/agent-linux-amd64', sha256: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', size: 1048576 } });

const UploadMeta = z.object({ version: Version, component: ComponentName, os: Platform, arch: Platform, signature: z.string().max(200).optional() });
const UploadForm = z
  .object({
    version: z.string().openapi(d('Version', '1.5.0')),
    component: z.string().openapi(d('Component', 'agent')),
    os: z.string().openapi(d('Operating system', 'linux')),
    arch: z.string().openapi(d('CPU architecture', 'amd64')),
    file: z.any().openapi({ type: 'string', format: 'binary', description: 'The binary (its SHA-256 is computed by Keel)' }),
    signature: z.string().optional().openapi(d('Ed25519 signature (base64) over the canonical manifest entry of the file; required when release keys are configured')),
  })
  .openapi('AgentBuildUpload', { example: { version: '1.5.0', component: 'agent', os: 'linux', arch: 'amd64', file: '(binary)' } });

const RingBody = z
  .object({
    deviceGroupId: z.uuid().openapi(d('A device group (of any organisation)')),
    soakMinutes: z.number().int().min(1).max(MAX_SOAK_MINUTES).openapi(d(`Minutes the ring soaks before the next opens (1-${MAX_SOAK_MINUTES})`, 60)),
  })
  .openapi('RingInput');

const PromoteBody = z
  .object({
    version: Version.openapi(d('Version to make the fleet target', '1.5.0')),
    component: ComponentName.optional().openapi(d('Only this component (default: every component the version has)')),
    rollout: z
      .object({
        percent: z.number().int().min(1).max(100).optional().openapi(d('Share of devices offered the version (default 100; devices outside the rings, once the rings are done)', 10)),
        rings: z
          .array(RingBody)
          .min(1)
          .max(MAX_RINGS)
          .superRefine((rings, ctx) => {
            rings.forEach((r, i) => {
              if (rings.findIndex((o) => o.deviceGroupId === r.deviceGroupId) < i) ctx.addIssue({ code: 'custom', path: [i, 'deviceGroupId'], message: 'names a device group already in an earlier ring' });
            });
          })
          .optional()
          .openapi(d(`Rings (at most ${MAX_RINGS}): device groups offered the version first, in order, each opening when the previous one soaked (docs/decisions.md "Agent update rings")`)),
      })
      .optional()
      .openapi(d('Staged rollout (default 100%, no rings)')),
    allowDowngrade: z.boolean().optional().openapi(d('Allow a version lower than the current target', false)),
  })
  .openapi('Promote', { example: { version: '1.5.0', rollout: { percent: 10 } } });

const Promoted = z
  .object({
    version: z.string().openapi(d('Promoted version')),
    promoted: z.array(z.string()).openapi(d('Platforms (component:os/arch) whose target is now this version')),
    missing: z.array(z.string()).openapi(d('Platforms with enrolled devices that this version has no build for (they keep their target)')),
    rollout: z
      .object({ percent: z.number().int().openapi(d('Rollout share')), rings: z.array(RingBody).openapi(d('The rings, in order (empty: none); ring 1 is open')) })
      .openapi(d('Rollout')),
  })
  .openapi('Promoted');

const RolloutBody = z
  .object({
    component: ComponentName.optional().openapi(d('Only this component (default: all)')),
    percent: z.number().int().min(1).max(100).openapi(d('New share (never lower than the current one)', 50)),
  })
  .openapi('RolloutWiden', { example: { component: 'agent', percent: 50 } });

const AdvanceBody = z
  .object({ component: ComponentName.optional().openapi(d('Only this component (default: all)')) })
  .openapi('RolloutAdvance', { example: { component: 'agent' } });

const Advanced = z
  .object({
    advanced: z
      .array(
        z.object({
          component: ComponentName,
          version: z.string().openapi(d('The rollout\'s version')),
          ring: z.number().int().nullable().openapi(d('The ring opened, or null: the rest of the fleet (the rings are done)')),
        }),
      )
      .openapi(d('The rollouts moved')),
  })
  .openapi('RolloutAdvanced');

const ResumeBody = z
  .object({ component: ComponentName.optional().openapi(d('Only this component (default: all)')) })
  .openapi('RolloutResume', { example: { component: 'agent' } });

const Synced = z
  .object({
    version: z.string().openapi(d('Synced version')),
    synced: z.array(z.string()).openapi(d('Registered builds, as component:os/arch')),
    promoted: z.array(z.string()).openapi(d('Platforms promoted at once (AGENT_AUTO_PROMOTE)')),
    autoPromote: AutoPromote.openapi(d('What AGENT_AUTO_PROMOTE did with this release')),
  })
  .openapi('Synced');

const DownloadParams = z.object({
  version: z.string().max(64).openapi({ param: { name: 'version', in: 'path' }, description: 'Version' }),
  component: z.string().max(20).openapi({ param: { name: 'component', in: 'path' }, description: 'Component' }),
  os: z.string().max(50).openapi({ param: { name: 'os', in: 'path' }, description: 'Operating system' }),
  arch: z.string().max(50).openapi({ param: { name: 'arch', in: 'path' }, description: 'CPU architecture' }),
});

/** The one middleware chain of every release write (release-writer.ts decides): authenticate, this rule (refusals audited), platform scope. */
export function releaseWriter(keel: Keel): MiddlewareHandler<AppEnv>[] {
  const check = documentAccess<MiddlewareHandler<AppEnv>>(
    async (c, next) => {
      const refusal = releaseRefusal(c.get('principal'));
      if (refusal) {
        await writeAudit(keel.db, requestInfo(c), { action: 'agent.release.refused', result: 'failure', details: { reason: refusal, route: `${c.req.method} ${c.req.path}` } });
        throw releaseRefused(refusal);
      }
      await next();
    },
    { releaseWriter: true },
  );
  return [authenticate(keel), check, requireScope(keel, { scopes: ['system'] })];
}

/** Releases: list, register (upload or remote), download, sync from the release host, promote, rollout. */
export function mountReleaseRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel);
  // Every write that changes what devices are offered: the one release rule (release-writer.ts).
  const writer = releaseWriter(keel);
  uploadLimitsOf(keel).set('/api/v1/agent-versions', keel.config.AGENT_UPLOAD_LIMIT_BYTES);

  api.openapi(
    createRoute({
      method: 'get', path: '/agent-versions', tags: ['agents'], summary: 'Registered versions with device counts and rollout state',
      middleware: [auth, ...guard(keel, { permission: ['devices', 'read'] })],
      request: {
        query: z.object({
          page: PageQuery.shape.page.openapi({ description: 'Page (from 1)' }),
          limit: PageQuery.shape.limit.openapi({ description: 'Page size (1-100)' }),
        }),
      },
      responses: { 200: json(paginated(VersionEntry), 'Versions, newest first per component') },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const all = await listVersions(keel, accessOf(c));
      return c.json(page(all.slice((q.page - 1) * q.limit, q.page * q.limit), q, all.length), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/agent-versions', tags: ['agents'], summary: 'Register a build (upload with BINARY_SOURCE=local, or a remote URL)',
      description: 'multipart/form-data with version, component, os, arch and file (BINARY_SOURCE=local; AGENT_UPLOAD_LIMIT_BYTES), or JSON naming a URL on the release host. With release keys configured (AGENT_RELEASE_PUBLIC_KEYS) the build must carry `signature` (a multipart field with an upload): unsigned or wrongly signed, 400 `release_signature_invalid` and nothing is written. With AGENT_AUTO_PROMOTE the version becomes the target at once (never a downgrade; `autoPromote` says what happened), unless the query says `promote=false`: then it is only registered (what the console does).',
      middleware: writer,
      // `required: false` lets each content type be validated only when it is the one sent.
      request: {
        query: z.object({
          promote: z
            .enum(['true', 'false'])
            .optional()
            .openapi({ description: 'false: register only, never promote (the console always sends it; promoting is a separate, deliberate step); absent or true: AGENT_AUTO_PROMOTE decides' }),
        }),
        body: { required: false, content: { 'application/json': { schema: RemoteBody }, 'multipart/form-data': { schema: UploadForm } } },
      },
      responses: { 201: json(Registered, 'Registered'), ...errors(409) },
    }),
    async (c) => {
      const info = requestInfo(c);
      const opts = { promote: c.req.valid('query').promote !== 'false' };
      const type = c.req.header('content-type') ?? '';
      if (/^multipart\/form-data/i.test(type)) {
        let form: Record<string, string | File | (string | File)[]>;
        try {
          form = await c.req.parseBody();
        } catch {
          throw agentsError('invalid_multipart');
        }
        const file = form.file;
        const meta = UploadMeta.safeParse({ version: form.version, component: form.component, os: form.os, arch: form.arch, signature: form.signature });
        if (!meta.success) throw validationError(zodFields(meta.error));
        if (!(file instanceof File)) throw validationError([{ path: 'file', message: 'is required (a file part)' }]);
        return c.json(await registerUpload(keel, meta.data, new Uint8Array(await file.arrayBuffer()), info, c.get('principal'), opts), 201);
      }
      if (!/^application\/json/i.test(type)) throw platformError('unsupported_media_type', { message: 'Send multipart/form-data or application/json' });
      let json: unknown;
      try {
        json = await c.req.json();
      } catch {
        throw platformError('invalid_json');
      }
      const body = RemoteBody.strict().safeParse(json);
      if (!body.success) throw validationError(zodFields(body.error));
      return c.json(await registerRemote(keel, body.data, info, c.get('principal'), opts), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/agent-versions/{version}/download/{component}/{os}/{arch}', tags: ['agents'], summary: 'Download an uploaded build',
      middleware: [deviceAuth(keel)],
      request: { params: DownloadParams },
      responses: { 200: { description: 'The binary', content: { 'application/octet-stream': { schema: z.string().openapi({ type: 'string', format: 'binary', description: 'The binary' }) } } }, ...errors(404) },
    }),
    async (c) => {
      const p = c.req.valid('param');
      const build = await localBuild(keel, p.version, p.component, p.os, p.arch);
      const stream = Readable.toWeb(createReadStream(build.path)) as ReadableStream;
      return c.body(stream, 200, { 'Content-Type': 'application/octet-stream', 'Content-Length': String(build.size), 'X-Checksum-Sha256': build.sha256 });
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/agent-versions/sync-remote', tags: ['agents'], summary: "Register a release from the release host's signed manifest",
      description: 'Fetches AGENT_RELEASE_URL/manifest.json and manifest.json.sig (Ed25519, AGENT_RELEASE_PUBLIC_KEY; unsigned or wrongly signed: 502 manifest_signature_invalid). Each asset carries its build `signature` (400 `release_signature_invalid` when one does not verify with the release keys; nothing is registered). Without version: the latest stable release (never a prerelease).',
      middleware: writer,
      request: { query: z.object({ version: Version.optional().openapi({ description: 'Version to sync (default: latest stable)' }) }) },
      responses: { 200: json(Synced, 'Synced'), ...errors(404, 409, 502) },
    }),
    async (c) => c.json(await syncRemote(keel, c.req.valid('query').version, requestInfo(c), c.get('principal')), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/agent-versions/promote', tags: ['agents'], summary: 'Make a version the fleet target (optionally staged)',
      middleware: writer,
      request: { body: jsonBody(PromoteBody) },
      responses: { 200: json(Promoted, 'Promoted'), ...errors(404, 409) },
    }),
    async (c) => c.json(await promote(keel, c.req.valid('json'), requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/agent-versions/rollout', tags: ['agents'], summary: "Widen the current target's rollout",
      middleware: writer,
      request: { body: jsonBody(RolloutBody) },
      responses: { 200: json(z.object({ updated: z.array(z.string()).openapi(d('Platforms changed')), percent: z.number().int().openapi(d('New share')) }).openapi('RolloutWidened'), 'Widened'), ...errors(404, 409) },
    }),
    async (c) => {
      const b = c.req.valid('json');
      return c.json(await widenRollout(keel, b.component, b.percent, requestInfo(c)), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/agent-versions/rollout/resume', tags: ['agents'], summary: 'Resume a halted rollout (failure counting restarts)',
      middleware: writer,
      request: { body: jsonBody(ResumeBody) },
      responses: { 200: json(z.object({ resumed: z.array(z.string()).openapi(d('Platforms resumed')) }).openapi('RolloutResumed'), 'Resumed'), ...errors(409) },
    }),
    async (c) => c.json(await resumeRollout(keel, c.req.valid('json').component, requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/agent-versions/rollout/advance', tags: ['agents'], summary: 'Open the next ring of a rollout now',
      description:
        'Ends the soak of the current ring of each rollout with rings (of the component, or all) whatever its counts: the next ring opens, or after the last ring the rest of the fleet. 409 `no_further_ring` (none left to open), `rollout_halted` (resume first), `rollout_changed` (another advance moved it meanwhile). The `agents.ring-advance` job does the same on its own once a ring has soaked with a failure rate under AGENT_HALT_FAILURE_PERCENT.',
      middleware: writer,
      request: { body: jsonBody(AdvanceBody) },
      responses: { 200: json(Advanced, 'Advanced'), ...errors(409) },
    }),
    async (c) => c.json(await advanceRollout(keel, c.req.valid('json').component, requestInfo(c)), 200),
  );
}
