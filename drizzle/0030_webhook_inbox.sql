-- Events accepted by `POST /events` while the API is saturated and not yet routed (docs/decisions.md
-- "Publishing under load stores the event; routing follows"): the 202 waits for this row only; a router of
-- any process takes rows oldest first (`FOR UPDATE SKIP LOCKED`) and, in one statement, deletes
-- them and writes their payloads and deliveries, so each event is routed exactly once. The id is a
-- UUIDv7 (time-ordered: the primary key is the order) and becomes the stored payload's id.
CREATE TABLE "webhook_inbox" (
  "id" uuid PRIMARY KEY NOT NULL,
  "org_id" uuid NOT NULL,
  "event_type" varchar(100) NOT NULL,
  "event_id" varchar(100) NOT NULL,
  "body" json NOT NULL,
  "traceparent" text,
  "created_at" timestamp with time zone NOT NULL
);
