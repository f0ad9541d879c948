-- Webhooks: every rotated-out secret keeps its own overlap (the ones older than the newest previous
-- one, sealed as a JSON list with their expiries).
ALTER TABLE "webhooks" ADD COLUMN "older_secrets_sealed" text;
