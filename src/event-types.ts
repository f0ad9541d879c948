// The catalogue of event types, with no import: the server and the web console (its webhook event
// picker) both read it from here (docs/decisions.md, "The console's API types").

/** Event types a webhook can subscribe to (docs/specification.md "Events"). */
export const EVENT_TYPES = [
  'device.enrolled', 'device.online', 'device.offline', 'device.updated', 'device.decommissioned',
  'alert.triggered', 'alert.acknowledged', 'alert.resolved', 'alert.escalated',
  'script.started', 'script.completed', 'script.failed',
  'automation.started', 'automation.completed', 'automation.failed',
  'policy.evaluated', 'policy.violation', 'policy.compliant',
  'patch.available', 'patch.approved', 'patch.installed', 'patch.failed', 'patch.rollback',
  'security.score_changed', 'remote.session.started', 'remote.session.ended', 'remote.file.transferred',
  'user.login', 'user.logout', 'user.deactivated', 'session.login', 'session.logout',
  'webhook.test', 'webhook.disabled',
] as const;

/**
 * Operational events: delivered to every active webhook of the organisation, whatever it subscribed
 * to (docs/decisions.md "Retry schedules").
 */
export const OPERATIONAL_EVENT_TYPES = ['webhook.disabled'] as const satisfies readonly (typeof EVENT_TYPES)[number][];

export type EventType = (typeof EVENT_TYPES)[number];

export function isEventType(value: string): value is EventType {
  return (EVENT_TYPES as readonly string[]).includes(value);
}
