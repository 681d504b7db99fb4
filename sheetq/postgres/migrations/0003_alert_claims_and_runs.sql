-- alert claims and the runs' presence
-- docs/design.md §11 "No transaction stays open across a call outside the database": one
-- alert digest at a time per queue is a committed claim with its own lease ("sending until
-- T"); the send happens outside any transaction, then the mark in a new one, which lets the
-- claim go. A claim whose mark never came is taken again only after `until`.
CREATE TABLE sheetq_alert_claims (
    queue      text PRIMARY KEY,
    owner      text NOT NULL,          -- the run that sends (its run id)
    claimed_at timestamptz NOT NULL,   -- the server's clock
    until      timestamptz NOT NULL    -- sending until: then another run may send again
);

-- docs/design.md §11 "A gone worker is named": each `sheetq worker` and `sheetq process` run
-- holds the session-level advisory lock `lock_key` on its connection while it lives; a
-- run whose key no session holds is gone, and `status`, `show` and `requeue` say so.
CREATE TABLE sheetq_runs (
    run_id     text PRIMARY KEY,
    queue      text NOT NULL,
    kind       text NOT NULL,          -- worker | process
    host       text NOT NULL,
    pid        integer NOT NULL,
    lock_key   bigint NOT NULL,        -- hashtextextended(run_id, 0)
    started_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX sheetq_runs_queue ON sheetq_runs (queue, started_at);

-- Whether the run whose advisory lock key is `key` is gone: no session of this database
-- holds the lock (pg_advisory_lock(bigint) shows in pg_locks as classid = high 32 bits,
-- objid = low 32 bits, objsubid = 1).
CREATE FUNCTION sheetq_run_gone(key bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM pg_locks AS l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = ((key >> 32) & 4294967295)::oid
          AND l.objid = (key & 4294967295)::oid)
$$;
