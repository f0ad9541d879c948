import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of agents (devices, enrolment, releases): code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const AGENTS_ERRORS = {
  binary_source_remote: { status: 400, message: 'Uploads need BINARY_SOURCE=local; register a remote build with JSON {version, component, os, arch, url, sha256, size}' },
  downgrade_refused: { status: 409, message: 'Promoting this version would be a downgrade (set allowDowngrade)' },
  invalid_device_token: { status: 401, message: 'The device token is invalid or revoked' },
  invalid_enrollment_key: { status: 401, message: 'The enrollment key is invalid, expired or revoked' },
  invalid_multipart: { status: 400, message: 'The multipart body could not be read' },
  manifest_invalid: { status: 502, message: 'The release manifest is not in the documented format' },
  manifest_signature_invalid: { status: 502, message: 'The release manifest signature does not verify with AGENT_RELEASE_PUBLIC_KEY' },
  no_further_ring: { status: 409, message: 'No rollout has a ring (or the rest of the fleet) left to open' },
  not_halted: { status: 409, message: 'No halted rollout to resume' },
  placement_forbidden: { status: 403, message: 'Your access is restricted to other sites or device groups' },
  placement_mismatch: { status: 400, message: 'The device group belongs to another site' },
  release_exists: { status: 409, message: 'This build is already registered' },
  release_host_error: { status: 502, message: 'The release host answered with an error' },
  release_host_unconfigured: { status: 503, message: 'AGENT_RELEASE_URL is not set' },
  release_host_unreachable: { status: 502, message: 'The release host could not be reached' },
  release_key_missing: { status: 503, message: 'AGENT_RELEASE_PUBLIC_KEY is not set: unsigned release metadata is never accepted' },
  release_signature_invalid: { status: 400, message: 'The release signature does not verify' },
  rollout_changed: { status: 409, message: 'The rollout moved on while this request was made; read its status and try again' },
  rollout_halted: { status: 409, message: 'The rollout is halted: resume it before advancing its rings' },
  rollout_narrowing: { status: 409, message: 'The rollout is already wider' },
} as const;

export const agentsError = errorCatalogue('agents', AGENTS_ERRORS);
