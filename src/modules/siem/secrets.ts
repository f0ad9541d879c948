import type { Keel } from '../../keel.js';
import type { SealedColumn } from '../../platform/reseal.js';

/** The context an https stream's secret is sealed under: it opens only on its own row. */
const secretAad = (streamId: string): string => `audit_streams:${streamId}:secret`;

export const sealStreamSecret = (keel: Keel, streamId: string, secret: string): string => keel.secrets.sealer.seal(secret, secretAad(streamId));

export const openStreamSecret = (keel: Keel, streamId: string, sealed: string | null): string | null =>
  sealed === null ? null : keel.secrets.sealer.open(sealed, secretAad(streamId));

/** The sealed column of this module, for `keel secrets reseal` (platform/reseal.ts). */
export const STREAM_SEALED: SealedColumn[] = [{ table: 'audit_streams', column: 'secret_sealed', keys: ['id'], context: (r) => secretAad(r.id ?? '') }];
