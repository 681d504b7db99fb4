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
