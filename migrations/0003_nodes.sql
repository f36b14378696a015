-- Live service instances and the internal gRPC address peers reach them at: forwarding
-- looks the lease owner up here, and the admin API lists it.
CREATE TABLE node_registry (
    node_id      text        PRIMARY KEY,
    grpc_addr    text        NOT NULL,
    http_addr    text        NOT NULL,
    version      text        NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    stopped_at   timestamptz
);
