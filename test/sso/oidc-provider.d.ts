/** The part of oidc-provider 9 (no bundled types) that the SSO tests use. */
declare module 'oidc-provider' {
  import type { IncomingMessage, ServerResponse } from 'node:http';
  export interface ProviderAccount {
    accountId: string;
    claims: () => Record<string, unknown> | Promise<Record<string, unknown>>;
  }
  export interface ProviderConfiguration {
    clients?: Record<string, unknown>[];
    cookies?: { keys?: string[] };
    scopes?: string[];
    claims?: Record<string, string[]>;
    findAccount?: (ctx: unknown, id: string) => ProviderAccount | undefined | Promise<ProviderAccount | undefined>;
    pkce?: { required?: () => boolean };
    [key: string]: unknown;
  }
  export default class Provider {
    constructor(issuer: string, configuration?: ProviderConfiguration);
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
    interactionFinished(req: IncomingMessage, res: ServerResponse, result: Record<string, unknown>, options?: Record<string, unknown>): Promise<void>;
  }
}
