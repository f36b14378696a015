-- name: ListRoster :many
-- Every signer of the roster; each node polls it (signers.rosterPollInterval).
SELECT signer, source, key_ref, state, added_at, added_by, retiring_at, retired_at,
       COALESCE(retired_by, '')::text AS retired_by, note, updated_at, paused_at, paused_by, pause_note
FROM signer_roster ORDER BY signer;

-- name: GetRosterSigner :one
SELECT signer, source, key_ref, state, added_at, added_by, retiring_at, retired_at,
       COALESCE(retired_by, '')::text AS retired_by, note, updated_at, paused_at, paused_by, pause_note
FROM signer_roster WHERE signer = @signer;

-- name: RegisterConfigSigners :exec
-- A node registers the signers of its own file at start: a row only where none exists, so
-- what an operator recorded (a retirement, a key source added at run time) stands.
INSERT INTO signer_roster (signer, source, added_by)
SELECT s, 'config', @node_id FROM unnest(@signers::text[]) AS s
ON CONFLICT (signer) DO NOTHING;

-- name: AddRosterSigner :one
-- Puts a signer into service: a new row, or one retiring or retired made active again with
-- the key source given now (its nonce cursor and history are kept, so its nonces go on
-- where they stopped). An active signer is left as it is; the caller compares the source.
INSERT INTO signer_roster AS r (signer, source, key_ref, added_by, note)
VALUES (@signer, @source, @key_ref, @added_by, @note)
ON CONFLICT (signer) DO UPDATE SET
    source = EXCLUDED.source, key_ref = EXCLUDED.key_ref, state = 'active', added_at = now(),
    added_by = EXCLUDED.added_by, retiring_at = NULL, retired_at = NULL, retired_by = NULL,
    note = EXCLUDED.note, updated_at = now()
WHERE r.state <> 'active'
RETURNING signer, source, key_ref, state, added_at, added_by, retiring_at, retired_at,
       COALESCE(retired_by, '')::text AS retired_by, note, updated_at, paused_at, paused_by, pause_note;

-- name: RetireRosterSigner :one
-- Records a retirement. The row is locked FOR UPDATE first, which waits for every writer
-- batch holding it FOR KEY SHARE (LockLeaseAndReadCursor): a create that batch allocated
-- commits before the retirement, and every batch after it reads 'retiring' and allocates
-- nothing. A signer without a row (a file signer of a node that has not started since the
-- roster existed) gets one in the same statement.
WITH locked AS (
    SELECT r.signer FROM signer_roster r WHERE r.signer = @signer FOR UPDATE
),
updated AS (
    UPDATE signer_roster r SET state = 'retiring', retiring_at = now(), retired_by = @retired_by::text, note = @note, updated_at = now()
    FROM locked WHERE r.signer = locked.signer AND r.state = 'active'
    RETURNING r.signer, r.source, r.key_ref, r.state, r.added_at, r.added_by, r.retiring_at, r.retired_at,
              COALESCE(r.retired_by, '')::text AS retired_by, r.note, r.updated_at, r.paused_at, r.paused_by, r.pause_note
),
inserted AS (
    INSERT INTO signer_roster (signer, source, state, retiring_at, retired_by, note)
    SELECT @signer, 'config', 'retiring', now(), @retired_by::text, @note
    WHERE NOT EXISTS (SELECT 1 FROM locked)
    ON CONFLICT (signer) DO NOTHING
    RETURNING signer, source, key_ref, state, added_at, added_by, retiring_at, retired_at,
              COALESCE(retired_by, '')::text AS retired_by, note, updated_at, paused_at, paused_by, pause_note
)
SELECT * FROM updated
UNION ALL
SELECT * FROM inserted;

-- name: CompleteRetirement :one
-- A retiring signer with no unfinished transaction left on any chain is retired. No create
-- can add one meanwhile: batches read the row's state under FOR KEY SHARE and this locks it
-- FOR UPDATE. Returns the row when it was retired now.
WITH locked AS (
    SELECT r.signer FROM signer_roster r WHERE r.signer = @signer AND r.state = 'retiring' FOR UPDATE
)
UPDATE signer_roster r SET state = 'retired', retired_at = now(), updated_at = now()
FROM locked
WHERE r.signer = locked.signer
  AND NOT EXISTS (SELECT 1 FROM managed_tx m WHERE m.signer = r.signer AND m.confirmed_at IS NULL)
RETURNING r.signer, r.source, r.key_ref, r.state, r.added_at, r.added_by, r.retiring_at, r.retired_at,
          COALESCE(r.retired_by, '')::text AS retired_by, r.note, r.updated_at, r.paused_at, r.paused_by, r.pause_note;

-- name: CountUnfinishedBySigner :one
-- A retiring signer's unfinished transactions on every chain (the admin answer shows them).
SELECT count(*)::bigint FROM managed_tx WHERE signer = @signer AND confirmed_at IS NULL;

-- name: PauseRosterSigner :one
-- Pauses a signer. The row is locked FOR UPDATE first, which waits for every writer batch
-- holding it FOR KEY SHARE: a create that batch allocated commits before the pause, and every
-- batch after it reads the pause and allocates nothing. A paused signer stays paused (the
-- first pause's time, operator and note are kept): no row is returned then.
WITH locked AS (
    SELECT r.signer FROM signer_roster r WHERE r.signer = @signer FOR UPDATE
)
UPDATE signer_roster r SET paused_at = now(), paused_by = @paused_by::text, pause_note = @note::text, updated_at = now()
FROM locked WHERE r.signer = locked.signer AND r.paused_at IS NULL
RETURNING r.signer, r.source, r.key_ref, r.state, r.added_at, r.added_by, r.retiring_at, r.retired_at,
          COALESCE(r.retired_by, '')::text AS retired_by, r.note, r.updated_at, r.paused_at, r.paused_by, r.pause_note;

-- name: ResumeRosterSigner :one
-- Resumes a paused signer; no row when it was not paused.
UPDATE signer_roster r SET paused_at = NULL, paused_by = '', pause_note = '', updated_at = now()
WHERE r.signer = @signer AND r.paused_at IS NOT NULL
RETURNING r.signer, r.source, r.key_ref, r.state, r.added_at, r.added_by, r.retiring_at, r.retired_at,
          COALESCE(r.retired_by, '')::text AS retired_by, r.note, r.updated_at, r.paused_at, r.paused_by, r.pause_note;
