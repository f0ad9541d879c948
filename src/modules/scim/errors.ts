/**
 * SCIM protocol errors (RFC 7644 §3.12): `/scim/v2` answers them in the SCIM error schema
 * (`schemas`, `status` as a string, `scimType`, `detail`), not Keel's envelope (docs/decisions.md
 * "SCIM provisioning"). The `/api/v1` routes of this module use the platform's catalogue.
 */
import type { ErrorDef } from '../../platform/http/errors.js';

/**
 * The module's codes in Keel's envelope (docs/decisions.md "Error catalogues"): none of its own; its
 * `/api/v1` routes answer the platform's and the lower modules' codes.
 */
export const SCIM_ERRORS = {} as const satisfies Record<string, ErrorDef>;

export type ScimType = 'invalidFilter' | 'tooMany' | 'uniqueness' | 'mutability' | 'invalidSyntax' | 'invalidPath' | 'noTarget' | 'invalidValue' | 'invalidVers' | 'sensitive';

export const SCIM_ERROR_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:Error';

export class ScimError extends Error {
  override name = 'ScimError';
  constructor(
    readonly status: 400 | 401 | 403 | 404 | 409 | 412 | 413 | 415 | 429 | 500 | 501 | 503,
    readonly detail: string,
    readonly scimType?: ScimType,
    readonly headers?: Record<string, string>,
  ) {
    super(detail);
  }

  body(): { schemas: string[]; status: string; scimType?: ScimType; detail: string } {
    return { schemas: [SCIM_ERROR_SCHEMA], status: String(this.status), ...(this.scimType ? { scimType: this.scimType } : {}), detail: this.detail };
  }
}

export const scimNotFound = (what: string) => new ScimError(404, `${what} not found`);
export const scimInvalid = (detail: string, scimType: ScimType = 'invalidValue') => new ScimError(400, detail, scimType);
