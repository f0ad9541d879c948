-- Webhooks: every rotated-out secret keeps its own overlap (the ones older than the newest previous
-- one, sealed as a JSON list with their expiries).
ALTER TABLE "webhooks" ADD COLUMN "older_secrets_sealed" text;
--> statement-breakpoint
-- A manual retry names the failed delivery it retries; one retry per failed delivery.
ALTER TABLE "webhook_deliveries" ADD COLUMN "retry_of" uuid;--> statement-breakpoint
CREATE UNIQUE INDEX "webhook_deliveries_retry_of_idx" ON "webhook_deliveries" USING btree ("retry_of") WHERE "webhook_deliveries"."retry_of" is not null;
--> statement-breakpoint
-- An event's body is stored once, referenced by each of its deliveries (it was copied into every one).
CREATE TABLE "webhook_payloads" (
	"id" uuid PRIMARY KEY NOT NULL,
	"org_id" uuid NOT NULL,
	"body" json NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);--> statement-breakpoint
CREATE INDEX "webhook_payloads_created_idx" ON "webhook_payloads" USING btree ("created_at");--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "payload_id" uuid;--> statement-breakpoint
-- Existing deliveries: each body becomes a payload of its own (its delivery's id).
INSERT INTO "webhook_payloads" ("id", "org_id", "body", "created_at") SELECT "id", "org_id", "payload", "created_at" FROM "webhook_deliveries";--> statement-breakpoint
UPDATE "webhook_deliveries" SET "payload_id" = "id";--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ALTER COLUMN "payload_id" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" DROP COLUMN "payload";--> statement-breakpoint
CREATE INDEX "webhook_deliveries_payload_idx" ON "webhook_deliveries" USING btree ("payload_id");
