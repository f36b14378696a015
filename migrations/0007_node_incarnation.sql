-- A node's row belongs to one process at a time: its incarnation, random per process start.
-- Lease owners are node id and incarnation together, so a restarted process is a new owner
-- (its acquisitions increment the token), and two processes given one node id never share
-- a lease or a token; the second one to start refuses to serve.
ALTER TABLE node_registry ADD COLUMN incarnation text NOT NULL DEFAULT '';
