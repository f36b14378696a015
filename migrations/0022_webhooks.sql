-- Webhook subscriptions: receivers the service pushes events to, each with its own cursor
-- in the completions feed.
--
-- One node delivers a subscription at a time: it holds the row's lease (owner_node,
-- fencing_token, lease_expires_at), taken and renewed like a signer's, and moves the cursor
-- only with the token it holds, so a node that lost the lease (paused, cut off) can no longer
-- move it; the node that took over resumes from the cursor. Delivery is at least once: an
-- event whose acknowledgement was lost is sent again, with the same event id.
CREATE TABLE webhook_subscription (
    subscription_id  uuid        PRIMARY KEY,
    url              text        NOT NULL,
    -- The HMAC-SHA256 key of the signatures; never logged, never answered after creation.
    secret           text        NOT NULL,
    filter           jsonb       NOT NULL,
    description      text        NOT NULL DEFAULT '',
    state            text        NOT NULL DEFAULT 'active',
    -- The feed position of the last event delivered (acknowledged with a 2xx) or skipped
    -- by the filter.
    cursor           bigint      NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    created_by       text        NOT NULL,
    last_success_at  timestamptz,
    failing_since    timestamptz,
    last_error       text        NOT NULL DEFAULT '',
    delivered        bigint      NOT NULL DEFAULT 0,
    owner_node       text,
    fencing_token    bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    CONSTRAINT webhook_subscription_state_check CHECK (state IN ('active', 'paused', 'dead'))
);
CREATE INDEX webhook_subscription_active_idx ON webhook_subscription (lease_expires_at) WHERE state = 'active';
