import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createMailer } from '../../src/platform/mail.js';

/** Where a message goes, as the invitation answer reports it (`invitationEmail`): SMTP, the log, or nowhere. */
describe('the mailer says where mail goes', () => {
  const log = pino({ level: 'silent' });
  it('SMTP when SMTP_URL is set, the log in development without it, nowhere in production without it', () => {
    expect(createMailer({ smtpUrl: 'smtp://127.0.0.1:2525', from: 'keel@example.com', production: false, log }).destination).toBe('smtp');
    expect(createMailer({ smtpUrl: undefined, from: 'keel@example.com', production: false, log }).destination).toBe('log');
    expect(createMailer({ smtpUrl: undefined, from: 'keel@example.com', production: true, log }).destination).toBe('nowhere');
  });
});
