-- The completions feed is ordered by positions assigned after commit, by one sequencer
-- transaction at a time (the feed_sequencer row lock). A consumer's cursor is a position;
-- a completion not positioned yet can only receive a position above every position served
-- so far, whatever else runs on the cluster, so serving no longer waits for the oldest
-- transaction anywhere on the cluster (pg_snapshot_xmin) to end.
ALTER TABLE tx_completions ADD COLUMN feed_position bigint, ADD COLUMN positioned_at timestamptz;

CREATE TABLE feed_sequencer (
    id             boolean PRIMARY KEY DEFAULT true CHECK (id),
    -- last_position is the highest position assigned; pruned_through the highest one
    -- retention deleted (a cursor below it points into what is gone).
    last_position  bigint  NOT NULL,
    pruned_through bigint  NOT NULL DEFAULT 0
);

-- Completions from before keep the order the feed served them in, (xid, seq).
WITH numbered AS (SELECT seq, row_number() OVER (ORDER BY xid, seq) AS pos FROM tx_completions)
UPDATE tx_completions c SET feed_position = n.pos, positioned_at = c.completed_at FROM numbered n WHERE c.seq = n.seq;
INSERT INTO feed_sequencer (last_position) SELECT COALESCE(max(feed_position), 0) FROM tx_completions;

CREATE UNIQUE INDEX tx_completions_position_idx ON tx_completions (feed_position) WHERE feed_position IS NOT NULL;
CREATE INDEX tx_completions_unpositioned_idx ON tx_completions (seq) WHERE feed_position IS NULL;
