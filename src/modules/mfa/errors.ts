import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of mfa (second factors): code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const MFA_ERRORS = {
  challenge_expired: { status: 400, message: 'The passkey challenge is invalid, expired or already used: start again', alsoStatus: 401 },
  code_expired: { status: 400, message: 'The code has expired or was tried too many times: request a new one with /auth/phone/verify' },
  invalid_code: { status: 400, message: 'The code is not valid', alsoStatus: 401 },
  invalid_passkey: { status: 400, message: 'The passkey could not be verified', alsoStatus: 401 },
  invalid_temp_token: { status: 401, message: 'The sign-in attempt expired: sign in again' },
  last_mfa_factor: { status: 409, message: 'This passkey is your last second factor and your role requires MFA: enrol another factor before removing it' },
  mfa_already_enabled: { status: 409, message: 'An authenticator app is already enrolled; disable it first to enrol another' },
  mfa_enrollment_required: { status: 428, message: 'Your role requires multi-factor authentication: enrol an authenticator app first' },
  mfa_not_enabled: { status: 409, message: 'No authenticator or SMS factor is enrolled' },
  mfa_required: { status: 403, message: 'This action needs a session verified with a second factor: sign in again with MFA' },
  mfa_required_by_organization: { status: 403, message: 'Your organization requires MFA; it cannot be disabled' },
  mfa_setup_expired: { status: 400, message: 'There is no pending authenticator setup (or it expired): start again with /auth/mfa/setup' },
  passkey_counter_regression: { status: 401, message: "This passkey's signature counter went backwards, so it may have been copied: sign in with another factor and remove it" },
  passkey_exists: { status: 409, message: 'This passkey is already registered' },
  passkey_not_allowed: { status: 403, message: 'Your organization does not allow passkeys' },
  passkey_not_enrolled: { status: 409, message: 'This account has no passkey' },
  passkeys_unavailable: { status: 503, message: 'Passkeys are not available on this server' },
  recent_sign_in_required: { status: 403, message: 'This needs a session signed in with a passkey or another second factor within the last 10 minutes: sign in again' },
  sign_in_passkeys_required: { status: 409, message: 'Register at least two sign-in passkeys before removing the password' },
  phone_not_verified: { status: 409, message: 'Verify a phone number first: /auth/phone/verify, then /auth/phone/confirm' },
  sms_already_enabled: { status: 409, message: 'SMS is already your second factor' },
  sms_not_allowed: { status: 403, message: 'Your organization does not allow SMS MFA' },
  sms_not_enabled: { status: 409, message: 'SMS is not a second factor of this account' },
  sms_send_failed: { status: 502, message: 'The SMS could not be sent; try again later' },
  sms_unavailable: { status: 503, message: 'SMS is not available on this server: no SMS gateway is configured' },
  totp_not_allowed: { status: 403, message: 'Your organization does not allow authenticator app (TOTP) MFA' },
} as const;

export const mfaError = errorCatalogue('mfa', MFA_ERRORS);
