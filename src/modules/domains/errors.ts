import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of domains (email domains): code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const DOMAINS_ERRORS = {
  domain_claimed: { status: 409, message: 'Another organization has verified this domain' },
  domain_exists: { status: 409, message: 'This domain is already claimed here: verify it, or delete it first' },
} as const;

export const domainsError = errorCatalogue('domains', DOMAINS_ERRORS);
