/**
 * Release signatures: `manifestEntry`, `verifyBuildSignature`, `keyId`, `parseReleaseKeys`,
 * `keyListStatement`, `signBuild` and friends. The implementation is `platform/release-signing.ts`
 * (platform, so that `config.ts` can check the keys at start); server, CLI and agent import it here.
 */
export * from '../../platform/release-signing.js';
