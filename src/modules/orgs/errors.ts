import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of orgs (partners, organisations, sites, device groups): code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const ORGS_ERRORS = {
  invalid_site: { status: 400, message: 'siteId must name a site of the same organization' },
  partner_not_empty: { status: 409, message: 'The partner still has organizations: delete them first' },
  partner_slug_taken: { status: 409, message: 'Another partner already has this slug: choose another' },
} as const;

export const orgsError = errorCatalogue('orgs', ORGS_ERRORS);
