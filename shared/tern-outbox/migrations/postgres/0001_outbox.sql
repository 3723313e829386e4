-- Tern's transactional outbox on PostgreSQL 13 or newer, migration 0001.
--
-- Plain SQL, no extension: apply it with your own migration tool (Flyway, sqlx, Alembic,
-- node-pg-migrate...) or `psql -v ON_ERROR_STOP=1 -f 0001_outbox.sql`. Your application
-- inserts one row per event in the same transaction as its business change
-- (`tern_outbox::postgres`, docs/outbox.md "PostgreSQL outbox"); the PostgreSQL relay
-- (functions/relay-pg) claims unpublished rows, fans them out to the delivery queue, then
-- marks them published. Later migrations are new files (0002_...), never edits of this one.

CREATE TABLE IF NOT EXISTS tern_outbox (
    -- The relay's order: rows are claimed oldest first (`ORDER BY seq`). A sequence
    -- gives insert order, not commit order, and may have gaps (rolled-back inserts);
    -- the relay relies on neither: it claims whatever is unpublished.
    seq           bigserial   PRIMARY KEY,
    -- The tenant the event belongs to (`tern_core::ids`: 1-128 of [A-Za-z0-9_-]).
    tenant_id     text        NOT NULL,
    -- The event id, the `webhook-id` receivers see; unique within its tenant (below), as
    -- the DynamoDB item's `<tenant id>#<event id>` key is.
    event_id      text        NOT NULL,
    -- The event type (`order.paid`).
    event_type    text        NOT NULL,
    -- The event's creation time, to the millisecond (the writer truncates it, as the
    -- DynamoDB item's RFC 3339 `created_at` does).
    created_at    timestamptz NOT NULL,
    -- The payload's exact JSON text. `text`, never `json`/`jsonb`: `jsonb` reorders keys,
    -- drops duplicate keys and rewrites numbers (1e2 becomes 100), and `json` may be
    -- re-serialised by tooling, while receivers verify signatures over the exact bytes
    -- the application wrote (Hookdeck Outpost moved its events off `jsonb` for this).
    payload       text        NOT NULL,
    -- The W3C trace context of the code that wrote the event (docs/tracing.md), or NULL.
    traceparent   text,
    tracestate    text,
    -- When the row was written (the transaction's start): the relay's lag is the age of
    -- the oldest unpublished row.
    inserted_at   timestamptz NOT NULL DEFAULT now(),
    -- Set by the relay once SQS accepted every delivery message of the event; rows
    -- published longer ago than the relay's retention are deleted by the relay.
    published_at  timestamptz,
    -- Set by the relay for a row it cannot read (a payload that is not a JSON object, a
    -- bad id...): the row is never claimed again and never blocks the rows after it. Fix
    -- it and set `parked_reason` (and `parked_at`) back to NULL to relay it.
    parked_reason text,
    parked_at     timestamptz,
    CONSTRAINT tern_outbox_tenant_event UNIQUE (tenant_id, event_id)
);

-- The relay's claim: `WHERE published_at IS NULL AND parked_reason IS NULL ORDER BY seq
-- LIMIT n FOR UPDATE SKIP LOCKED`. Partial, so it holds only the backlog (usually a few
-- rows) however large the table grows.
CREATE INDEX IF NOT EXISTS tern_outbox_unpublished
    ON tern_outbox (seq)
    WHERE published_at IS NULL AND parked_reason IS NULL;

-- The relay's retention: `DELETE ... WHERE published_at < now() - retention`.
CREATE INDEX IF NOT EXISTS tern_outbox_published
    ON tern_outbox (published_at)
    WHERE published_at IS NOT NULL;
