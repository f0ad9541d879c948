// The console's knowledge of the API's error codes in one place: their type (the envelope's `code`
// in the generated document: each catalogued code once the document enumerates them), the codes the
// console makes itself, and what each means to the person in front of the page (docs/decisions.md,
// "The console's API types").
import { ApiError } from '../api';
import type { ErrorEnvelope } from './types';

/** A code the API answers with. */
export type ServerErrorCode = ErrorEnvelope['code'];

/** Codes the console gives errors it makes itself (no API answer behind them). */
export type ConsoleErrorCode = 'network_error' | 'invalid_input' | 'passkey_cancelled' | 'passkey_exists' | 'passkey_unavailable' | `http_${number}`;

// The document lists every catalogued code (an enum), so a comparison with a code no one answers
// stops compiling.
export type ErrorCode = ServerErrorCode | ConsoleErrorCode;

/** True when `err` is an API error with this code. */
export function hasCode(err: unknown, code: ErrorCode): err is ApiError {
  return err instanceof ApiError && err.code === code;
}

/** `mfaSubject`: what the refused write changes (MfaSubject of the page). */
export function describeError(err: unknown, mfaSubject?: string | null): string {
  if (!(err instanceof ApiError)) return 'Something went wrong in the console. Reload the page and try again.';
  switch (err.code) {
    case 'mfa_enrollment_required':
      return 'Your role requires a second factor. Set up an authenticator app, a phone or a passkey first.';
    case 'mfa_required':
      // ErrorAlert offers the step-up (POST /auth/mfa/step-up) under this sentence.
      return `${mfaSubject ?? 'This'} can only be changed from a session signed in with a second factor. Confirm this session with a code below (authenticator, texted code or recovery code), or sign out and sign in again with your passkey, and retry.`;
    case 'forbidden':
    case 'permission_denied':
      return `You do not have permission to do this. ${err.message}`;
    case 'context_required':
      return 'Your account does not belong to a partner or an organisation yet, so there is nothing to manage here.';
  }
  if (err.status === 429) {
    const wait = err.retryAfter ? ` Try again in ${err.retryAfter < 90 ? `${err.retryAfter} seconds` : `${Math.ceil(err.retryAfter / 60)} minutes`}.` : '';
    return `Too many attempts.${wait}`;
  }
  if (err.status === 403) return `You do not have permission to do this: ${err.message}`;
  return err.message;
}

