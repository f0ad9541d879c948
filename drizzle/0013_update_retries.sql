-- A device that failed or rolled back an offered update is not offered that version again until someone
-- retries it (POST /devices/update-now): the offer row says so (blocked), and when it was retried.
ALTER TABLE "agent_offers" ADD COLUMN "blocked" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "agent_offers" ADD COLUMN "retried_at" timestamp with time zone;--> statement-breakpoint
UPDATE "agent_offers" SET "blocked" = true WHERE "outcome" IN ('failed', 'rolled_back');--> statement-breakpoint
-- A device's update history (GET /devices/:id/update-history), newest first.
CREATE INDEX "agent_update_reports_device_idx" ON "agent_update_reports" USING btree ("device_id","created_at");
