/** Who is calling: a signed-in user (access token) or an API key acting for its creator. */
export interface Principal {
  kind: 'user' | 'api_key';
  userId: string;
  email: string;
  /** Access tokens: the session (refresh family) id; null for API keys. */
  sessionId: string | null;
  /** True when the session was established with a second factor (step-up). API keys never. */
  mfa: boolean;
  isPlatformAdmin: boolean;
  /** API keys: the key's id. */
  apiKeyId: string | null;
}
