-- The signer roster: which signers the cluster serves, added and retired at run time without
-- a restart (an admin call records the change here; every node polls it). It names where a
-- signer's key lives, never the key: a keystore account in the configured keystore
-- directory, an AWS KMS key id, a Cloud KMS key version, a clef account. Signers configured
-- in a node's file are registered as source 'config' when the node starts, so every signer a
-- create can name has a row its allocation can lock.
--
-- state: active (serves creates), retiring (refuses new creates; its unfinished transactions
-- are carried to a final state), retired (no unfinished transaction left; nodes drop the key
-- and let its leases go). Every writer batch reads the row FOR KEY SHARE inside its
-- transaction, and a retirement locks it FOR UPDATE, so a create commits before the
-- retirement is recorded or is refused: none is accepted after it.
CREATE TABLE signer_roster (
    signer      text        PRIMARY KEY,
    source      text        NOT NULL,
    key_ref     text        NOT NULL DEFAULT '',
    state       text        NOT NULL DEFAULT 'active',
    added_at    timestamptz NOT NULL DEFAULT now(),
    added_by    text        NOT NULL DEFAULT '',
    retiring_at timestamptz,
    retired_at  timestamptz,
    retired_by  text,
    note        text        NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT signer_roster_state_check CHECK (state IN ('active', 'retiring', 'retired')),
    CONSTRAINT signer_roster_source_check CHECK (source IN ('config', 'keystore', 'awsKms', 'gcpKms', 'external'))
);
