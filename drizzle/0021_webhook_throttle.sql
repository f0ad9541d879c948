-- Per-webhook throttling and a receiver's 429 (docs/decisions.md "Webhook throttling and stats").
-- `rate_limit_per_second`: at most this many attempts start per clock second, across every worker
-- (permits counted in `webhook_rate_windows`, or in Redis when the deployment has it). `hold_until`:
-- a receiver's 429 with Retry-After holds the webhook's deliveries until then; `rate_limited_streak`
-- counts the 429s in a row that were not counted as failed attempts.
ALTER TABLE "webhooks" ADD COLUMN "rate_limit_per_second" integer;--> statement-breakpoint
ALTER TABLE "webhooks" ADD COLUMN "hold_until" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "webhooks" ADD COLUMN "rate_limited_streak" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE TABLE "webhook_rate_windows" (
	"webhook_id" uuid PRIMARY KEY NOT NULL REFERENCES "webhooks"("id") ON DELETE CASCADE,
	"window_second" bigint NOT NULL,
	"used" integer NOT NULL,
	"granted" integer NOT NULL
);
