import { errorCatalogue } from '../../platform/http/errors.js';

/**
 * The error codes of webhooks: code → status and message (docs/decisions.md "Error catalogues").
 * A message here is the default; a site may give one that names what was refused.
 */
export const WEBHOOKS_ERRORS = {
  already_retried: { status: 409, message: 'This delivery has been retried already' },
  api_key_required: { status: 403, message: 'Events are published with an API key holding events:publish' },
  delivery_not_failed: { status: 409, message: 'Only failed deliveries can be retried' },
  replay_running: { status: 409, message: 'A replay of this webhook is running; wait for it to finish' },
  replay_too_large: { status: 400, message: 'The replay would send more events than one replay may' },
  invalid_webhook_url: { status: 400, message: 'Invalid webhook URL' },
  too_many_rotations: { status: 409, message: 'Too many rotated-out secrets still sign beside the current one' },
  webhook_limit_reached: { status: 409, message: 'The organisation has as many webhooks as it may have; delete one first' },
  webhook_not_active: { status: 409, message: 'Only an active webhook can be tested' },
} as const;

export const webhooksError = errorCatalogue('webhooks', WEBHOOKS_ERRORS);
