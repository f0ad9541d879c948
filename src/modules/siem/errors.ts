import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of audit streaming: code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const SIEM_ERRORS = {
  audit_stream_limit_reached: { status: 409, message: 'This partner (or the platform) has as many audit streams as it may have; delete one first' },
  invalid_stream_url: { status: 400, message: 'Invalid audit stream URL' },
  invalid_stream_tls: { status: 400, message: 'tls.ca must be one or more PEM certificates' },
  stream_secret_invalid: { status: 400, message: 'An https stream needs a secret (16 to 256 characters) to sign its batches; a syslog stream takes none' },
} as const;

export const siemError = errorCatalogue('siem', SIEM_ERRORS);
