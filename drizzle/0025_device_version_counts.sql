-- The fleet picture at scale (docs/decisions.md "Agent distribution at scale"): live devices counted per
-- everything the update decision and the reasons for being behind read (organisation, site, device group,
-- platform, auto-update, stored status, the three component versions). Kept by triggers on `devices`, in
-- the transaction of every write that changes one of those columns (enrolment, a reported version, a
-- status change, a move, auto-update, decommissioning, a site or group deleted, an organisation deleted).
-- Writers only ever INSERT a delta row (+1 / -1 per key): no counter row is locked, so concurrent writers
-- neither wait for nor deadlock with each other. The `agents.version-counts-rollup` job folds the deltas
-- (`folded` false) into one row per key (`folded` true), an organisation at a time; a reader sums the
-- rows of each key either way. The heartbeat's batched last-seen write sets none of these columns: it
-- fires nothing. `offline` here is the stored status, which the offline sweep sets.
CREATE TABLE "device_version_counts" (
	"org_id" uuid NOT NULL,
	"site_id" uuid,
	"device_group_id" uuid,
	"os" varchar(50),
	"arch" varchar(50),
	"auto_update" boolean NOT NULL,
	"status" varchar(20) NOT NULL,
	"agent" text,
	"helper" text,
	"watchdog" text,
	"n" integer NOT NULL,
	"folded" boolean DEFAULT false NOT NULL
);--> statement-breakpoint
CREATE INDEX "device_version_counts_org_idx" ON "device_version_counts" USING btree ("org_id");--> statement-breakpoint
CREATE INDEX "device_version_counts_unfolded_idx" ON "device_version_counts" USING btree ("org_id") WHERE NOT "folded";--> statement-breakpoint
INSERT INTO device_version_counts (org_id, site_id, device_group_id, os, arch, auto_update, status, agent, helper, watchdog, n, folded)
	SELECT org_id, site_id, device_group_id, os, arch, auto_update, status, components->>'agent', components->>'helper', components->>'watchdog', count(*), true
	FROM devices WHERE decommissioned_at IS NULL GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10;--> statement-breakpoint
CREATE FUNCTION device_version_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO device_version_counts (org_id, site_id, device_group_id, os, arch, auto_update, status, agent, helper, watchdog, n)
		SELECT org_id, site_id, device_group_id, os, arch, auto_update, status, components->>'agent', components->>'helper', components->>'watchdog', count(*)
		FROM new_devices WHERE decommissioned_at IS NULL GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10;
	RETURN NULL;
END
$$;--> statement-breakpoint
CREATE FUNCTION device_version_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO device_version_counts (org_id, site_id, device_group_id, os, arch, auto_update, status, agent, helper, watchdog, n)
		SELECT org_id, site_id, device_group_id, os, arch, auto_update, status, components->>'agent', components->>'helper', components->>'watchdog', -count(*)
		FROM old_devices WHERE decommissioned_at IS NULL GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10;
	RETURN NULL;
END
$$;--> statement-breakpoint
CREATE FUNCTION device_version_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.decommissioned_at IS NULL THEN
		INSERT INTO device_version_counts (org_id, site_id, device_group_id, os, arch, auto_update, status, agent, helper, watchdog, n)
			VALUES (OLD.org_id, OLD.site_id, OLD.device_group_id, OLD.os, OLD.arch, OLD.auto_update, OLD.status, OLD.components->>'agent', OLD.components->>'helper', OLD.components->>'watchdog', -1);
	END IF;
	IF NEW.decommissioned_at IS NULL THEN
		INSERT INTO device_version_counts (org_id, site_id, device_group_id, os, arch, auto_update, status, agent, helper, watchdog, n)
			VALUES (NEW.org_id, NEW.site_id, NEW.device_group_id, NEW.os, NEW.arch, NEW.auto_update, NEW.status, NEW.components->>'agent', NEW.components->>'helper', NEW.components->>'watchdog', 1);
	END IF;
	RETURN NULL;
END
$$;--> statement-breakpoint
CREATE TRIGGER devices_version_counts_insert AFTER INSERT ON devices REFERENCING NEW TABLE AS new_devices FOR EACH STATEMENT EXECUTE FUNCTION device_version_counts_insert();--> statement-breakpoint
CREATE TRIGGER devices_version_counts_delete AFTER DELETE ON devices REFERENCING OLD TABLE AS old_devices FOR EACH STATEMENT EXECUTE FUNCTION device_version_counts_delete();--> statement-breakpoint
CREATE TRIGGER devices_version_counts_update AFTER UPDATE OF org_id, site_id, device_group_id, os, arch, auto_update, status, components, decommissioned_at ON devices FOR EACH ROW
	WHEN ((OLD.org_id, OLD.site_id, OLD.device_group_id, OLD.os, OLD.arch, OLD.auto_update, OLD.status, OLD.components->>'agent', OLD.components->>'helper', OLD.components->>'watchdog', OLD.decommissioned_at IS NULL)
		IS DISTINCT FROM (NEW.org_id, NEW.site_id, NEW.device_group_id, NEW.os, NEW.arch, NEW.auto_update, NEW.status, NEW.components->>'agent', NEW.components->>'helper', NEW.components->>'watchdog', NEW.decommissioned_at IS NULL))
	EXECUTE FUNCTION device_version_counts_update();--> statement-breakpoint
CREATE INDEX "agent_offers_blocked_idx" ON "agent_offers" USING btree ("device_id") WHERE "blocked";
