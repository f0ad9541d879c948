import { existsSync } from 'node:fs';
import { describe, it } from 'vitest';
import { chromium, type Browser, type BrowserContext, type CDPSession, type Page } from 'playwright-core';

/**
 * A real browser for tests: Debian's chromium (never a downloaded one) driven by playwright-core,
 * with a CDP virtual authenticator standing in for a platform passkey (Touch ID, Windows Hello).
 */

export const CHROMIUM_PATH = process.env.KEEL_CHROMIUM ?? '/usr/bin/chromium';

/** Flags that make chromium start quietly here (root, closed network); see machines/node.md. */
const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

let warned = false;

/**
 * True when chromium is installed. When it is not, a loud line says the browser tests are skipped,
 * and under REQUIRE_REAL_BACKENDS=1 a failing test is registered in the calling file, so CI cannot
 * pass without the real browser.
 */
export function chromiumAvailable(): boolean {
  if (existsSync(CHROMIUM_PATH)) return true;
  if (!warned) {
    warned = true;
    console.warn(
      `\n!!! ${CHROMIUM_PATH} not found: the real-browser (WebAuthn/passkey) tests are SKIPPED. Install Debian's chromium ` +
        `(apt-get install chromium) or set KEEL_CHROMIUM.${process.env.REQUIRE_REAL_BACKENDS === '1' ? ' REQUIRE_REAL_BACKENDS=1: failing.' : ''}\n`,
    );
  }
  if (process.env.REQUIRE_REAL_BACKENDS === '1') {
    describe('real browser', () => {
      it('needs Debian chromium (REQUIRE_REAL_BACKENDS=1)', () => {
        throw new Error(`${CHROMIUM_PATH} is missing: install chromium (see .ci/run)`);
      });
    });
  }
  return false;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: CHROMIUM_ARGS });
}

/** A credential held by a virtual authenticator (CDP `WebAuthn.Credential`; binary fields base64). */
export type VirtualCredential = Awaited<ReturnType<typeof getCredentials>>[number];

async function getCredentials(cdp: CDPSession, authenticatorId: string) {
  return (await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials;
}

/** What the browser's credential serialises to, the JSON @simplewebauthn/server verifies. */
export interface CredentialJSON {
  id: string;
  rawId: string;
  type: string;
  response: Record<string, unknown>;
  clientExtensionResults: Record<string, unknown>;
  authenticatorAttachment?: string;
}

/** One "device": a browser context on Keel's origin with its own platform authenticator. */
export interface PasskeyDevice {
  context: BrowserContext;
  page: Page;
  cdp: CDPSession;
  authenticatorId: string;
  /** navigator.credentials.create with Keel's creation options JSON; returns the registration JSON. */
  create(options: unknown): Promise<CredentialJSON>;
  /** navigator.credentials.get with Keel's request options JSON; returns the assertion JSON. */
  get(options: unknown): Promise<CredentialJSON>;
  credentials(): Promise<VirtualCredential[]>;
  /** Replaces a stored credential's signature counter (as a cloned authenticator would have it). */
  setSignCount(credentialIdBase64url: string, signCount: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * In-page code (a string, so the test transform never rewrites it): base64url ↔ ArrayBuffer for the
 * option fields the WebAuthn API takes as buffers, and the credential back to JSON, as
 * @simplewebauthn/browser would do it.
 */
const PAGE_CODEC = String.raw`
  const fromB64 = (s) => {
    const b64 = s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4);
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out.buffer;
  };
  const toB64 = (buf) => {
    const bytes = new Uint8Array(buf);
    let bin = '';
    for (let i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]);
    return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  };
  const descriptors = (list) => (list || []).map((d) => ({ ...d, id: fromB64(d.id) }));
`;

const CREATE_SCRIPT = String.raw`async (options) => {
  ${PAGE_CODEC}
  const publicKey = {
    ...options,
    challenge: fromB64(options.challenge),
    user: { ...options.user, id: fromB64(options.user.id) },
    excludeCredentials: descriptors(options.excludeCredentials),
  };
  const cred = await navigator.credentials.create({ publicKey });
  const r = cred.response;
  const publicKeyDer = typeof r.getPublicKey === 'function' ? r.getPublicKey() : null;
  return {
    id: cred.id,
    rawId: toB64(cred.rawId),
    type: cred.type,
    authenticatorAttachment: cred.authenticatorAttachment || undefined,
    clientExtensionResults: cred.getClientExtensionResults(),
    response: {
      clientDataJSON: toB64(r.clientDataJSON),
      attestationObject: toB64(r.attestationObject),
      transports: typeof r.getTransports === 'function' ? r.getTransports() : [],
      authenticatorData: typeof r.getAuthenticatorData === 'function' ? toB64(r.getAuthenticatorData()) : undefined,
      publicKeyAlgorithm: typeof r.getPublicKeyAlgorithm === 'function' ? r.getPublicKeyAlgorithm() : undefined,
      publicKey: publicKeyDer ? toB64(publicKeyDer) : undefined,
    },
  };
}`;

const GET_SCRIPT = String.raw`async (options) => {
  ${PAGE_CODEC}
  const publicKey = { ...options, challenge: fromB64(options.challenge), allowCredentials: descriptors(options.allowCredentials) };
  const cred = await navigator.credentials.get({ publicKey });
  const r = cred.response;
  return {
    id: cred.id,
    rawId: toB64(cred.rawId),
    type: cred.type,
    authenticatorAttachment: cred.authenticatorAttachment || undefined,
    clientExtensionResults: cred.getClientExtensionResults(),
    response: {
      clientDataJSON: toB64(r.clientDataJSON),
      authenticatorData: toB64(r.authenticatorData),
      signature: toB64(r.signature),
      userHandle: r.userHandle ? toB64(r.userHandle) : undefined,
    },
  };
}`;

/**
 * Opens a page on `origin` (Keel's own: `${origin}/health`) in a fresh context and attaches a
 * virtual authenticator: CTAP2, internal transport (a platform authenticator), resident keys, user
 * verification that succeeds, presence simulated.
 */
export async function openPasskeyDevice(browser: Browser, origin: string): Promise<PasskeyDevice> {
  const context = await browser.newContext();
  const page = await context.newPage();
  const res = await page.goto(`${origin}/health`);
  if (!res?.ok()) throw new Error(`could not open ${origin}/health: ${res?.status() ?? 'no response'}`);
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable', { enableUI: false });
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2',
      ctap2Version: 'ctap2_1',
      transport: 'internal',
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  const run = (script: string, options: unknown) => page.evaluate<CredentialJSON>(`(${script})(${JSON.stringify(options)})`);
  const credentials = () => getCredentials(cdp, authenticatorId);
  return {
    context,
    page,
    cdp,
    authenticatorId,
    create: (options) => run(CREATE_SCRIPT, options),
    get: (options) => run(GET_SCRIPT, options),
    credentials,
    async setSignCount(credentialIdBase64url, signCount) {
      const all = await credentials();
      const cred = all.find((c) => Buffer.from(c.credentialId, 'base64').toString('base64url') === credentialIdBase64url);
      if (!cred) throw new Error(`the authenticator holds no credential ${credentialIdBase64url}`);
      await cdp.send('WebAuthn.removeCredential', { authenticatorId, credentialId: cred.credentialId });
      await cdp.send('WebAuthn.addCredential', { authenticatorId, credential: { ...cred, signCount } });
    },
    async close() {
      await context.close();
    },
  };
}
