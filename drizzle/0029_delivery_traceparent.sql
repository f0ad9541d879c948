-- The trace a webhook delivery continues (docs/decisions.md "Runtime and tracing"): the W3C
-- `traceparent` of the request that published its event (or queued a test delivery or a retry),
-- written only while tracing is on, so a delivery sent by another process is still a span of that
-- trace. Never a secret: a trace id, a span id and the sampled flag.
ALTER TABLE "webhook_deliveries" ADD COLUMN "traceparent" text;
