import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of users (members, invitations): code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const USERS_ERRORS = {
  invalid_role: { status: 400, message: 'That role cannot be given to a member of this scope' },
  invitation_invalid: { status: 409, message: 'This invitation is no longer valid. Ask for a new invitation.' },
  invitation_other_account: { status: 403, message: 'This invitation is for another account: sign in as the invited account' },
  invitation_pending: { status: 409, message: 'An invited user becomes active by accepting the invitation' },
  not_invited: { status: 409, message: 'Only users with a pending invitation can be sent a new one' },
  self_change_forbidden: { status: 403, message: 'You cannot change your own membership, role or status here' },
  user_associated_elsewhere: { status: 409, message: 'This email belongs to an account of another partner or organization' },
  user_disabled: { status: 409, message: 'This user is disabled' },
  user_exists: { status: 409, message: 'User already exists in this scope' },
} as const;

export const usersError = errorCatalogue('users', USERS_ERRORS);
