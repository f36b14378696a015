-- name: GetSpendingPolicy :one
SELECT scope_kind, scope, version, rules::text AS rules, updated_at, updated_by
FROM spending_policy WHERE scope_kind = @scope_kind AND scope = @scope;

-- name: SerializePolicyChanges :exec
-- Changes of one scope take turns even when the scope has no row to lock yet (its first
-- policy, or after a delete): two would otherwise number the same version.
SELECT pg_advisory_xact_lock(hashtextextended('txmanager spending policy ' || @scope_kind::text || ' ' || @scope::text, 0));

-- name: HoldFirstPolicies :one
-- A writer batch holds this key, shared, before any of its statements reads a policy; a
-- scope's first policy (it has no row a batch could lock) takes it alone
-- (SerializeFirstPolicies). So a first policy either commits before a batch reads and binds
-- it, or waits for the batches that found none to commit: they came before it. One key for
-- every scope: a batch takes one lock whatever its signers and credentials, and a first
-- policy, a rare change, waits for the batches open at the time. A row, not a command: a
-- query goes out with the transaction's BEGIN, where a command without arguments would begin
-- it in a round trip of its own.
SELECT pg_advisory_xact_lock_shared(hashtextextended('txmanager first spending policy', 0))::text AS held;

-- name: SerializeFirstPolicies :exec
-- A scope's first policy waits for the writer batches open now (HoldFirstPolicies).
SELECT pg_advisory_xact_lock(hashtextextended('txmanager first spending policy', 0));

-- name: LockSpendingPolicy :one
-- A policy change locks the scope's row (when there is one) so that changes of one scope
-- are numbered one at a time and wait for the writer batches admitting under it.
SELECT version, rules::text AS rules FROM spending_policy WHERE scope_kind = @scope_kind AND scope = @scope FOR UPDATE;

-- name: ListSpendingPolicies :many
SELECT scope_kind, scope, version, rules::text AS rules, updated_at, updated_by
FROM spending_policy ORDER BY scope_kind, scope;

-- name: LastSpendingPolicyVersion :one
-- Versions go on across a deletion: a scope's history never reuses a number.
SELECT COALESCE(max(version), 0)::bigint FROM spending_policy_version WHERE scope_kind = @scope_kind AND scope = @scope;

-- name: UpsertSpendingPolicy :exec
INSERT INTO spending_policy (scope_kind, scope, version, rules, windowed, updated_at, updated_by)
VALUES (@scope_kind, @scope, @version, @rules::jsonb, @windowed, now(), @updated_by)
ON CONFLICT (scope_kind, scope) DO UPDATE SET version = EXCLUDED.version, rules = EXCLUDED.rules, windowed = EXCLUDED.windowed,
    updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by;

-- name: DeleteSpendingPolicy :execrows
DELETE FROM spending_policy WHERE scope_kind = @scope_kind AND scope = @scope;

-- name: InsertSpendingPolicyVersion :exec
INSERT INTO spending_policy_version (scope_kind, scope, version, rules, changed_at, changed_by)
VALUES (@scope_kind, @scope, @version, sqlc.narg(rules)::jsonb, now(), @changed_by);

-- name: ListSpendingPolicyVersions :many
SELECT version, COALESCE(rules::text, '')::text AS rules, changed_at, changed_by
FROM spending_policy_version WHERE scope_kind = @scope_kind AND scope = @scope ORDER BY version DESC LIMIT @max_rows;

-- name: PoliciesForAdmission :many
-- The policies binding a writer batch's part for one signer: the signer's own and those of
-- the credentials its creates came with, read inside the fenced allocation transaction and
-- locked until it commits, in one order (signer before credentials, by scope) so batches on
-- several nodes take them alike. A windowed policy's lock makes admissions under it take turns
-- on every node; a policy change waits for the batches admitting under the version before.
SELECT scope_kind, scope, version, rules::text AS rules, windowed
FROM spending_policy
WHERE (scope_kind = 'signer' AND scope = @signer) OR (scope_kind = 'credential' AND scope = ANY(@credentials::text[]))
ORDER BY scope_kind DESC, scope
FOR UPDATE;

-- name: PolicyWindowTotals :many
-- What each (scope, window) already counts on the chain: the buckets of the current minute
-- and of the whole minutes of the period before it (buckets from before windows were kept
-- per chain, chain 0, count on every chain). A chain below 0 counts every chain's (the
-- gauges' view, one figure a scope). The current minute is the clock's as the statement
-- runs, after the policies' locks, not the transaction's start: AddPolicySpend buckets by
-- the same clock, so a batch that waited for the locks across a minute's end is counted
-- in the minute it admitted in. The clock is read once, in a subquery, so the bound stays an
-- index condition (a volatile function in it would be checked row by row).
SELECT w.scope_kind::text AS scope_kind, w.scope::text AS scope, w.minutes::bigint AS minutes,
       COALESCE(sum(s.value_wei), 0)::text AS value_wei, COALESCE(sum(s.fee_wei), 0)::text AS fee_wei
FROM (SELECT unnest(@scope_kinds::text[]) AS scope_kind, unnest(@scopes::text[]) AS scope, unnest(@window_minutes::bigint[]) AS minutes) AS w
LEFT JOIN policy_spend s ON s.scope_kind = w.scope_kind AND s.scope = w.scope AND (@chain_id::bigint < 0 OR s.chain_id IN (@chain_id::bigint, 0))
    AND s.minute >= (SELECT date_trunc('minute', clock_timestamp())) - make_interval(mins => w.minutes::int)
GROUP BY w.scope_kind, w.scope, w.minutes;

-- name: AddPolicySpend :exec
-- Counts what a batch admitted under windowed policies on the chain, one row per scope, in
-- the minute it admitted in (clock_timestamp(): the transaction may have started a minute
-- earlier and waited for the policies' locks; bucketed by its start, its spend would fall
-- out of a window a minute early).
INSERT INTO policy_spend AS p (scope_kind, scope, chain_id, minute, value_wei, fee_wei)
SELECT x.k, x.s, @chain_id::bigint, date_trunc('minute', clock_timestamp()), x.v::numeric, x.f::numeric
FROM (SELECT unnest(@scope_kinds::text[]) AS k, unnest(@scopes::text[]) AS s, unnest(@value_wei::text[]) AS v, unnest(@fee_wei::text[]) AS f) AS x
ON CONFLICT (scope_kind, scope, chain_id, minute) DO UPDATE SET value_wei = p.value_wei + EXCLUDED.value_wei, fee_wei = p.fee_wei + EXCLUDED.fee_wei;

-- name: PrunePolicySpend :execrows
-- Buckets older than the longest window any policy may have (31 days) count in no window.
DELETE FROM policy_spend WHERE minute < now() - interval '31 days 1 minute';

-- name: LockPoliciesOfBatch :exec
-- Every policy a writer batch's full-path parts will read, locked at once in the order
-- PoliciesForAdmission uses.
SELECT 1
FROM spending_policy
WHERE (scope_kind = 'signer' AND scope = ANY(@signers::text[])) OR (scope_kind = 'credential' AND scope = ANY(@credentials::text[]))
ORDER BY scope_kind DESC, scope
FOR UPDATE;
