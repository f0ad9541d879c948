-- Webhooks: every rotated-out secret keeps its own overlap (the ones older than the newest previous
-- one, sealed as a JSON list with their expiries).
ALTER TABLE "webhooks" ADD COLUMN "older_secrets_sealed" text;
--> statement-breakpoint
-- A manual retry names the failed delivery it retries; one retry per failed delivery.
ALTER TABLE "webhook_deliveries" ADD COLUMN "retry_of" uuid;--> statement-breakpoint
CREATE UNIQUE INDEX "webhook_deliveries_retry_of_idx" ON "webhook_deliveries" USING btree ("retry_of") WHERE "webhook_deliveries"."retry_of" is not null;
