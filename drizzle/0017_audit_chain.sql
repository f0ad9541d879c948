-- Tamper-evident audit log (docs/decisions.md "Audit: hash chain, checkpoints, security events").
-- Every entry is a link of its scope's chain (its organisation; else its partner; else the platform):
-- position `chain_seq`, the previous link's `prev_hash`, and `hash` = hex SHA-256 of the canonical
-- encoding `audit_entry_hash` computes. A trigger links each inserted row under the lock of its
-- scope's head row, in the statement that inserts it.
ALTER TABLE "audit_logs" ADD COLUMN "chain_seq" bigint;--> statement-breakpoint
ALTER TABLE "audit_logs" ADD COLUMN "prev_hash" varchar(64);--> statement-breakpoint
ALTER TABLE "audit_logs" ADD COLUMN "hash" varchar(64);--> statement-breakpoint
CREATE TABLE "audit_chain_heads" (
	"scope_id" uuid PRIMARY KEY NOT NULL,
	"scope_kind" varchar(20) NOT NULL,
	"seq" bigint NOT NULL,
	"hash" varchar(64) NOT NULL,
	"prev_hash" varchar(64) NOT NULL,
	"start_seq" bigint DEFAULT 1 NOT NULL,
	"start_prev_hash" varchar(64) NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);--> statement-breakpoint
CREATE TABLE "audit_checkpoints" (
	"id" uuid PRIMARY KEY NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"scope_id" uuid NOT NULL,
	"scope_kind" varchar(20) NOT NULL,
	"seq" bigint NOT NULL,
	"hash" varchar(64) NOT NULL,
	"public_key" varchar(64) NOT NULL,
	"signature" varchar(100) NOT NULL
);--> statement-breakpoint
CREATE INDEX "audit_checkpoints_scope_idx" ON "audit_checkpoints" USING btree ("scope_id","seq");--> statement-breakpoint
CREATE TABLE "audit_event_buckets" (
	"scope_id" uuid NOT NULL,
	"action" varchar(100) NOT NULL,
	"source" varchar(64) NOT NULL,
	"minute" timestamp with time zone NOT NULL,
	"org_id" uuid,
	"partner_id" uuid,
	"count" integer NOT NULL,
	"first_at" timestamp with time zone NOT NULL,
	"last_at" timestamp with time zone NOT NULL,
	CONSTRAINT "audit_event_buckets_pk" PRIMARY KEY ("scope_id","action","source","minute")
);--> statement-breakpoint
CREATE INDEX "audit_event_buckets_minute_idx" ON "audit_event_buckets" USING btree ("minute");--> statement-breakpoint
CREATE FUNCTION audit_scope_id(org uuid, partner uuid) RETURNS uuid LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT coalesce(org, partner, '00000000-0000-0000-0000-000000000000'::uuid)
$$;--> statement-breakpoint
CREATE FUNCTION audit_entry_hash(prev varchar, seq bigint, e audit_logs) RETURNS varchar LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT encode(sha256(convert_to(jsonb_build_array(
		'keel-audit-v1', prev, seq, e.id,
		(extract(epoch FROM e.created_at) * 1000000)::bigint,
		e.actor_type, e.actor_id, e.actor_email, e.partner_id, e.org_id, e.action,
		e.target_type, e.target_id, e.changes, e.details, e.result,
		e.ip_address, e.user_agent, e.request_id
	)::text, 'UTF8')), 'hex')
$$;--> statement-breakpoint
CREATE FUNCTION audit_chain_append(e audit_logs, OUT link_seq bigint, OUT link_prev varchar, OUT link_hash varchar) LANGUAGE plpgsql AS $$
DECLARE
	s uuid := audit_scope_id(e.org_id, e.partner_id);
BEGIN
	LOOP
		UPDATE audit_chain_heads h
			SET seq = h.seq + 1, prev_hash = h.hash, hash = audit_entry_hash(h.hash, h.seq + 1, e), updated_at = now()
			WHERE h.scope_id = s
			RETURNING h.seq, h.prev_hash, h.hash INTO link_seq, link_prev, link_hash;
		IF FOUND THEN RETURN; END IF;
		INSERT INTO audit_chain_heads (scope_id, scope_kind, seq, hash, prev_hash, start_seq, start_prev_hash)
			VALUES (s, CASE WHEN e.org_id IS NOT NULL THEN 'organization' WHEN e.partner_id IS NOT NULL THEN 'partner' ELSE 'platform' END,
				0, repeat('0', 64), repeat('0', 64), 1, repeat('0', 64))
			ON CONFLICT (scope_id) DO NOTHING;
	END LOOP;
END
$$;--> statement-breakpoint
CREATE FUNCTION audit_logs_link() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	SELECT link_seq, link_prev, link_hash INTO NEW.chain_seq, NEW.prev_hash, NEW.hash FROM audit_chain_append(NEW);
	RETURN NEW;
END
$$;--> statement-breakpoint
DO $$
DECLARE
	r audit_logs;
	l record;
BEGIN
	FOR r IN SELECT * FROM audit_logs ORDER BY created_at, id LOOP
		SELECT * INTO l FROM audit_chain_append(r);
		UPDATE audit_logs SET chain_seq = l.link_seq, prev_hash = l.link_prev, hash = l.link_hash WHERE id = r.id;
	END LOOP;
END
$$;--> statement-breakpoint
ALTER TABLE "audit_logs" ALTER COLUMN "chain_seq" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "audit_logs" ALTER COLUMN "prev_hash" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "audit_logs" ALTER COLUMN "hash" SET NOT NULL;--> statement-breakpoint
CREATE INDEX "audit_logs_chain_idx" ON "audit_logs" USING btree (audit_scope_id("org_id", "partner_id"), "chain_seq");--> statement-breakpoint
CREATE TRIGGER audit_logs_link BEFORE INSERT ON audit_logs FOR EACH ROW EXECUTE FUNCTION audit_logs_link();
