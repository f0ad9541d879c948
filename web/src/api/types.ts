// The console's names for the API's schemas, all taken from the generated document types
// (schema.d.ts, `npm run openapi`): no hand-written copy of a server shape (docs/decisions.md,
// "The console's API types").
import type { components, paths } from './schema';

export type { components, paths };

/** A named schema of the API document. */
export type Schema<N extends keyof components['schemas']> = components['schemas'][N];

/** The error envelope `{error, code, details?}`. */
export type ErrorEnvelope = Schema<'Error'>;

/** A list answer: `data` and its `pagination`. */
export interface Page<T> {
  data: T[];
  pagination: { page: number; limit: number; total: number };
}
