import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of identity (accounts, passwords, sessions): code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const IDENTITY_ERRORS = {
  account_managed: { status: 409, message: "This account's email, name and status are managed by the organization's directory (SCIM): change them there" },
  csrf_failed: { status: 403, message: 'The x-service-csrf header must match the service_csrf cookie of this session' },
  email_taken: { status: 409, message: 'An account with this email already exists' },
  invalid_credentials: { status: 401, message: 'Invalid email or password' },
  invalid_current_password: { status: 400, message: 'The current password is not correct' },
  invalid_refresh_token: { status: 401, message: 'No refresh token' },
  password_login_refused: { status: 403, message: 'Password sign-in is not allowed for this account' },
  refresh_raced: { status: 409, message: 'This refresh token was just rotated by another request; use the newer pair' },
  user_required: { status: 403, message: 'This needs a signed-in user, not an API key' },
} as const;

export const identityError = errorCatalogue('identity', IDENTITY_ERRORS);
