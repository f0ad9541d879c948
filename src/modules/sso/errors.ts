import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of sso (single sign-on): code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const SSO_ERRORS = {
  provider_already_active: { status: 409, message: 'The organization already has an active SSO provider: deactivate it first' },
  sso_binding_mismatch: { status: 403, message: 'This sign-in was started in another browser: start it again here' },
  sso_logins_outstanding: { status: 429, message: 'Too many sign-ins are in progress for this organization; try again in a minute' },
  sso_provider_incomplete: { status: 400, message: 'The SSO provider lacks ssoUrl or certificate: fix it with PATCH /sso/providers/{id}' },
  sso_required: { status: 403, message: 'Your organization requires single sign-on: sign in through your identity provider' },
} as const;

export const ssoError = errorCatalogue('sso', SSO_ERRORS);
