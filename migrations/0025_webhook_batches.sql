-- A subscription may take several events in one delivery (a batch) when its receiver asks
-- for it. One event a delivery caps a subscription at about one event per round trip to its
-- receiver, which a receiver that was away for a while cannot catch up at. The default of 1
-- keeps every existing subscription on single-event deliveries. Adding a column with a
-- constant default rewrites nothing.
ALTER TABLE webhook_subscription ADD COLUMN IF NOT EXISTS batch_size integer NOT NULL DEFAULT 1;
ALTER TABLE webhook_subscription DROP CONSTRAINT IF EXISTS webhook_subscription_batch_size_check;
ALTER TABLE webhook_subscription ADD CONSTRAINT webhook_subscription_batch_size_check CHECK (batch_size BETWEEN 1 AND 100);
