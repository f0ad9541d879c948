import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { identityOf } from './context.js';
import type { RequestInfo } from './service.js';

/** A change to how an account signs in, told to its owner (ASVS 6.3.7, docs/security.md). */
export type AuthChange =
  | 'password_changed'
  | 'password_reset'
  | 'totp_enabled'
  | 'sms_enabled'
  | 'mfa_disabled'
  | 'recovery_codes_replaced'
  | 'passkey_added'
  | 'passkey_removed'
  | 'phone_verified';

const WHAT: Record<AuthChange, { subject: string; sentence: string }> = {
  password_changed: { subject: 'Your Keel password was changed', sentence: 'The password of your Keel account was changed, and every session was signed out.' },
  password_reset: { subject: 'Your Keel password was reset', sentence: 'The password of your Keel account was reset with an emailed link, and every session was signed out.' },
  totp_enabled: { subject: 'An authenticator app was set up for your Keel account', sentence: 'An authenticator app was set up as a second sign-in factor of your Keel account, with new recovery codes.' },
  sms_enabled: { subject: 'Text-message codes were turned on for your Keel account', sentence: 'Codes texted to your phone were turned on as a second sign-in factor of your Keel account.' },
  mfa_disabled: { subject: 'Two-step sign-in was turned off for your Keel account', sentence: 'The authenticator app, phone and recovery codes of your Keel account were removed (passkeys, if any, stay).' },
  recovery_codes_replaced: { subject: 'New recovery codes were made for your Keel account', sentence: 'New recovery codes were made for your Keel account; the earlier ones no longer work.' },
  passkey_added: { subject: 'A passkey was added to your Keel account', sentence: 'A passkey was added to your Keel account.' },
  passkey_removed: { subject: 'A passkey was removed from your Keel account', sentence: 'A passkey was removed from your Keel account.' },
  phone_verified: { subject: 'A phone number was verified for your Keel account', sentence: 'A phone number was verified for your Keel account.' },
};

// eslint-disable-next-line no-control-regex
const printable = (text: string, max: number): string => text.replace(/[\u0000-\u001f\u007f]+/g, ' ').slice(0, max);

/**
 * Emails the account's owner that a sign-in detail changed: what, when, and from which address and
 * browser, never a secret (no code, no link that acts). Queued after the answer on identity's
 * deferred queue, so a slow or failing mail server neither delays nor fails the change (the failure
 * is logged). Call once the change has committed.
 */
export function notifyAuthChange(keel: Keel, user: { email: string; name: string }, change: AuthChange, info: RequestInfo): void {
  const { subject, sentence } = WHAT[change];
  const at = clock.now().toISOString();
  identityOf(keel).deferred.run('auth_change_notice', info, (log) =>
    keel.mailer.send({
      to: user.email,
      subject,
      text: [
        `Hello ${printable(user.name, 255)},`,
        '',
        sentence,
        '',
        `When: ${at} (UTC)`,
        `From: ${info.ip ?? 'an unknown address'}${info.userAgent ? `, ${printable(info.userAgent, 200)}` : ''}`,
        '',
        'If this was you, there is nothing to do.',
        `If it was not, reset your password at ${keel.config.publicUrl}/forgot-password and tell your administrator at once.`,
      ].join('\n'),
    }, log),
  );
}
