import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of access (roles, permissions, scopes, API keys): code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const ACCESS_ERRORS = {
  api_key_forbidden: { status: 403, message: 'API keys cannot manage API keys' },
  circular_inheritance: { status: 400, message: 'Circular inheritance: a role cannot inherit from itself or from one of its descendants' },
  context_required: { status: 403, message: 'Partner or organization context is required' },
  full_org_access_required: { status: 403, message: 'Full partner organization access is required' },
  invalid_expiry: { status: 400, message: 'expiresAt must be in the future' },
  invalid_parent_role: { status: 400, message: 'The parent role is not valid here' },
  last_admin: { status: 409, message: 'This would leave no user with full administrative access (*:*) in this scope' },
  org_id_mismatch: { status: 400, message: 'The orgId given in the query, body and path must agree' },
  org_required: { status: 400, message: 'Organization context is required: name the organization with orgId' },
  own_role: { status: 403, message: 'You cannot change your own role' },
  partner_id_mismatch: { status: 400, message: 'The partnerId given in the query, body and path must agree' },
  permission_denied: { status: 403, message: 'You need a permission you do not have for this' },
  privilege_escalation: { status: 403, message: 'You cannot grant permissions you do not have' },
  role_in_use: { status: 400, message: 'The role is still in use by users or child roles' },
  scope_forbidden: { status: 403, message: 'This operation is not available in your scope' },
  scope_mismatch: { status: 400, message: 'A role cannot be cloned into a scope of another kind' },
  scope_required: { status: 400, message: 'Name the partner or organization of the role with partnerId or orgId' },
  system_role_immutable: { status: 403, message: 'System roles cannot be changed' },
  whole_org_access_required: { status: 403, message: 'This acts on the whole organization: your access is restricted to some sites or device groups' },
} as const;

export const accessError = errorCatalogue('access', ACCESS_ERRORS);
