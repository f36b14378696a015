-- Recovery after a database loss moves forward whatever the size and age of the loss.
--
-- A quarantine covers the nonces [db_next_nonce, chain_nonce). Recovery records the chain's
-- transaction at each of them as a row of its own, a bounded pass at a time, and keeps how
-- far it got here, in the same fenced statement that records the rows, so no pass repeats
-- what an earlier one recorded and none stops at a fixed window behind the head:
--   recorded_to      every nonce below it has its row (NULL: none yet, db_next_nonce);
--   scan_from_block  the block the next forward scan starts at: the block of the last
--                    nonce recorded (nonces are mined in order, so the next one is in it
--                    or after it); NULL until recovery has found where to start;
--   recorded_count   rows recorded so far for this quarantine.
-- An operator's release is a request (release_requested_*): the signer serves again once
-- every transaction the chain shows at the unknown nonces is recorded, so a retried lost
-- request is adopted whoever released the signer.
ALTER TABLE signer_quarantine ADD COLUMN IF NOT EXISTS recorded_to bigint;
ALTER TABLE signer_quarantine ADD COLUMN IF NOT EXISTS scan_from_block bigint;
ALTER TABLE signer_quarantine ADD COLUMN IF NOT EXISTS recorded_count bigint NOT NULL DEFAULT 0;
ALTER TABLE signer_quarantine ADD COLUMN IF NOT EXISTS release_requested_at timestamptz;
ALTER TABLE signer_quarantine ADD COLUMN IF NOT EXISTS release_requested_by text;
ALTER TABLE signer_quarantine ADD COLUMN IF NOT EXISTS release_request_note text;
