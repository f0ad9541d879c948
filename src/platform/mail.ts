import type { Transporter } from 'nodemailer';
import type { Logger } from './logger.js';

export interface Mail {
  to: string;
  subject: string;
  text: string;
}

export interface Mailer {
  /** True when a real SMTP server is configured (or the development log sink may show the content). */
  readonly delivers: boolean;
  /** Where a message goes: an SMTP server, the log (development without SMTP_URL), or nowhere (production without SMTP_URL). */
  readonly destination: 'smtp' | 'log' | 'nowhere';
  /** `log`: for the lines about this message (the request's logger, `requestLog`); the mailer's own by default. */
  send(mail: Mail, log?: Logger): Promise<void>;
}

/**
 * SMTP through nodemailer when SMTP_URL is set. Otherwise, in development, the whole message is
 * written to the log (clearly marked, links included); under production nothing secret is printed.
 */
export function createMailer(opts: { smtpUrl: string | undefined; from: string; production: boolean; log: Logger }): Mailer {
  if (opts.smtpUrl) {
    const url = opts.smtpUrl;
    // nodemailer is loaded with the first email, not at start-up.
    let transport: Promise<Transporter> | null = null;
    return {
      delivers: true,
      destination: 'smtp',
      async send(mail) {
        transport ??= import('nodemailer').then((m) => m.default.createTransport(url));
        await (await transport).sendMail({ from: opts.from, to: mail.to, subject: mail.subject, text: mail.text });
      },
    };
  }
  return {
    delivers: !opts.production,
    destination: opts.production ? 'nowhere' : 'log',
    send(mail, log = opts.log) {
      if (opts.production) {
        log.warn({ subject: mail.subject }, 'no email service configured (SMTP_URL): email not sent');
      } else {
        log.warn({ devEmailSink: true, to: mail.to, subject: mail.subject, body: mail.text }, 'DEVELOPMENT EMAIL (not sent; set SMTP_URL)');
      }
      return Promise.resolve();
    },
  };
}
