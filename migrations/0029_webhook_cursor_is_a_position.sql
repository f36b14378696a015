-- A webhook subscription's cursor of 0 meant both "from the start" and "after an empty
-- feed's head", and retention's check skipped it: one that stayed away past the horizon
-- was delivered on past the deleted completions. From now on 0 is stored as the last
-- position retention deleted, which the check compares like any other.
UPDATE webhook_subscription SET cursor = (SELECT pruned_through FROM feed_sequencer) WHERE cursor = 0;
