-- Agent update rings (docs/decisions.md "Agent update rings"): a promotion's ordered device groups
-- per (component, version). `opened` counts the rings open (1..n); n + 1 once the rest of the fleet
-- is open. Each ring in `rings` carries its group, soak minutes and when it opened.
CREATE TABLE "agent_rollout_rings" (
	"id" uuid PRIMARY KEY NOT NULL,
	"component" varchar(20) NOT NULL,
	"version" varchar(64) NOT NULL,
	"rings" jsonb NOT NULL,
	"opened" integer DEFAULT 1 NOT NULL,
	"halted_ring" integer,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);--> statement-breakpoint
CREATE UNIQUE INDEX "agent_rollout_rings_idx" ON "agent_rollout_rings" USING btree ("component","version");
