-- name: InsertApproval :many
-- An approval request, unless one is recorded under the same chain, signer and request id
-- (then nothing is written and the caller reads that one). Its times are the database's:
-- expiry is enforced by the database's clock, so a node's clock must not move it; the node
-- gives how long it waits (expires_at - created_at).
INSERT INTO tx_approval (approval_id, chain_id, signer, request_id, fingerprint, requester, to_address, value_wei, data, gas_limit,
    max_fee_per_gas, max_priority_fee_per_gas, policy_scope, policy_version, reason, role, required, created_at, expires_at)
VALUES (@approval_id, @chain_id, @signer, sqlc.narg(request_id), @fingerprint, @requester, sqlc.narg(to_address), CAST(sqlc.arg(value_wei)::text AS numeric), @data, @gas_limit,
    CAST(sqlc.narg(max_fee_per_gas)::text AS numeric), CAST(sqlc.narg(max_priority_fee_per_gas)::text AS numeric), @policy_scope, @policy_version, @reason, @role, @required,
    now(), now() + (sqlc.arg(expires_at)::timestamptz - sqlc.arg(created_at)::timestamptz))
ON CONFLICT (chain_id, signer, request_id) WHERE request_id IS NOT NULL DO NOTHING
RETURNING created_at, expires_at;

-- name: GetApproval :one
SELECT * FROM tx_approval_read WHERE approval_id = @approval_id;

-- name: LockApproval :one
-- A vote locks its approval: votes on one approval are counted one at a time.
SELECT * FROM tx_approval_read WHERE approval_id = @approval_id FOR UPDATE;

-- name: GetApprovalByRequest :one
-- Found through the table's request id index, then read through the view.
SELECT * FROM tx_approval_read
WHERE approval_id = (SELECT a.approval_id FROM tx_approval a WHERE a.chain_id = @chain_id AND a.signer = @signer AND a.request_id = @request_id);

-- name: FindApprovalsByRequestIDs :many
-- The signer's approval requests under the given request ids, through the table's request
-- id index, read through the view.
SELECT * FROM tx_approval_read
WHERE approval_id IN (
    SELECT a.approval_id FROM (SELECT DISTINCT unnest(@request_ids::text[]) AS id) r
    JOIN tx_approval a ON a.chain_id = @chain_id AND a.signer = @signer AND a.request_id = r.id
);

-- name: ListApprovals :many
-- Newest first (ids are time-ordered), after a cursor; filtered by state and signers.
SELECT * FROM tx_approval_read
WHERE (sqlc.arg(from_start)::bool OR approval_id < @before_id)
  AND (@state::text = '' OR state = @state)
  AND (sqlc.arg(all_signers)::bool OR signer = ANY(sqlc.arg(signers)::text[]))
ORDER BY approval_id DESC
LIMIT @max_rows;

-- name: ListApprovalVotes :many
SELECT approval_id, approver, approve, note, node_id, at FROM tx_approval_vote WHERE approval_id = ANY(@approval_ids::uuid[]) ORDER BY at, approver;

-- name: InsertApprovalVote :execrows
INSERT INTO tx_approval_vote (approval_id, approver, approve, note, node_id) VALUES (@approval_id, @approver, @approve, @note, @node_id)
ON CONFLICT (approval_id, approver) DO NOTHING;

-- name: ApproveApproval :exec
UPDATE tx_approval SET state = 'APPROVED', decided_at = now() WHERE approval_id = @approval_id AND state = 'AWAITING_APPROVAL';

-- name: FinishApproval :execrows
-- An approval's final state and its completion in one statement: the feed carries every
-- intent that ends without a nonce, with its reason.
WITH done AS (
    UPDATE tx_approval SET state = @state, final_reason = @final_reason, decided_at = now()
    WHERE approval_id = @approval_id AND state = ANY(@from_states::text[])
    RETURNING approval_id, chain_id, signer, state
)
INSERT INTO tx_completions (chain_id, tx_id, signer, status)
SELECT chain_id, approval_id, signer, state FROM done;

-- name: ExpireApprovals :many
-- Every open approval past its expiry becomes EXPIRED with its completion; any node may run
-- it, and a vote or an admission that locked the row first wins.
WITH due AS (
    SELECT approval_id FROM tx_approval
    WHERE state IN ('AWAITING_APPROVAL', 'APPROVED') AND expires_at <= now()
    ORDER BY expires_at LIMIT @max_rows
    FOR UPDATE
),
done AS (
    UPDATE tx_approval a SET state = 'EXPIRED', decided_at = now(),
        final_reason = format('expired at %s with %s of %s approvals', to_char(a.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
            (SELECT count(*) FROM tx_approval_vote v WHERE v.approval_id = a.approval_id AND v.approve), a.required)
    FROM due WHERE a.approval_id = due.approval_id
    RETURNING a.approval_id, a.chain_id, a.signer, a.state, a.final_reason
),
completed AS (
    INSERT INTO tx_completions (chain_id, tx_id, signer, status) SELECT chain_id, approval_id, signer, state FROM done RETURNING 1
)
SELECT approval_id, signer, final_reason FROM done;

-- name: LockApprovedForAdmission :many
-- The approvals a writer batch admits, still APPROVED and unexpired, locked until it commits,
-- with the rule they were approved under. Unexpired by the clock as the rows are locked,
-- not at the transaction's start: a batch that waited for locks past an approval's expiry
-- does not admit it.
SELECT approval_id, policy_scope, policy_version, role, required FROM tx_approval
WHERE approval_id = ANY(@approval_ids::uuid[]) AND state = 'APPROVED' AND expires_at > clock_timestamp()
ORDER BY approval_id
FOR UPDATE;

-- name: AdmitApprovals :exec
-- Each approval with the transaction it was admitted as: its own id, or a transaction the
-- chain held already and the admission adopted (admitted_tx_id).
UPDATE tx_approval a SET state = 'ADMITTED', decided_at = now(),
    admitted_tx_id = NULLIF(i.tx_id, i.approval_id)
FROM (SELECT unnest(@approval_ids::uuid[]) AS approval_id, unnest(@tx_ids::uuid[]) AS tx_id) AS i
WHERE a.approval_id = i.approval_id AND a.state = 'APPROVED';

-- name: ApprovedToAdmit :many
-- Approved intents waiting for their signer's writer, for one chain, in order of expiry
-- after the page before (after_expires_at, after_id): approvals held back for now (a paused
-- signer, funds) must not fill every page and keep the later ones waiting.
SELECT * FROM tx_approval_read
WHERE state = 'APPROVED' AND chain_id = @chain_id AND expires_at > now()
  AND (expires_at, approval_id) > (sqlc.arg(after_expires_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY expires_at, approval_id
LIMIT @max_rows;

-- name: PendingApprovals :one
-- What waits for approvers or for admission, and since when.
SELECT count(*)::bigint AS pending,
       COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 AS oldest_seconds
FROM tx_approval WHERE state IN ('AWAITING_APPROVAL', 'APPROVED');
