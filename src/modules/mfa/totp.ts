import { isNull, lt, or } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { transactionIf } from '../../platform/db/transaction.js';
import { clock } from '../../platform/clock.js';
import { users } from '../identity/schema.js';
import { updateAccount } from '../identity/accounts.js';
import { lazy } from '../../platform/lazy.js';

export const TOTP_PERIOD = 30;
export const TOTP_ISSUER = 'Keel';

// Loaded on first use, not at start-up.
const otp = lazy(() => import('otplib'));

export async function newTotpSecret(): Promise<string> {
  return (await otp()).generateSecret();
}

export async function otpAuthUrl(secret: string, email: string): Promise<string> {
  return (await otp()).generateURI({ issuer: TOTP_ISSUER, label: email, secret });
}

export async function qrCodeDataUrl(url: string): Promise<string> {
  const { default: QRCode } = await import('qrcode');
  return QRCode.toDataURL(url, { errorCorrectionLevel: 'M', margin: 1, width: 240 });
}

/**
 * Checks a 6-digit code against a secret at Keel's clock, allowing one period of drift either way.
 * Returns the RFC 6238 time-step the code belongs to, or null.
 */
export async function totpStep(secret: string, code: string): Promise<number | null> {
  if (!/^\d{6}$/.test(code)) return null;
  const now = clock.nowSeconds();
  const result = await (await otp()).verify({ secret, token: code, epoch: now, epochTolerance: TOTP_PERIOD });
  if (!result.valid) return null;
  return Math.floor(now / TOTP_PERIOD) + result.delta;
}

/**
 * Marks a time-step as used for the user: one conditional UPDATE, so a code (and any code of an
 * earlier step) is accepted once, also under parallel requests. False when it was already used.
 */
export async function claimTotpStep(keel: Keel, userId: string, step: number): Promise<boolean> {
  return transactionIf(false, keel.db, (tx) => updateAccount(keel, tx, userId, { totpLastStep: step }, or(isNull(users.totpLastStep), lt(users.totpLastStep, step))));
}
