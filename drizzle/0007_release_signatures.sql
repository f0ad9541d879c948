-- A build's release signature (Ed25519 over its canonical manifest entry, base64) and the id of the key
-- that verified it at registration; both null for builds registered without keys (development).
ALTER TABLE "agent_releases" ADD COLUMN "signature" text;--> statement-breakpoint
ALTER TABLE "agent_releases" ADD COLUMN "key_id" varchar(16);
