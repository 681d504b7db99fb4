-- the spreadsheet mirror's last-written state
-- docs/design.md §12: what `sheetq mirror` last wrote into each Queue row of the spreadsheet, so
-- that a pass tells a manager's edit (the cell differs from what the mirror wrote) from a
-- change in PostgreSQL (the task differs from what the mirror wrote).
CREATE TABLE sheetq_mirror (
    queue   text NOT NULL,
    task_id text NOT NULL,
    status  text NOT NULL,   -- the status cell as written
    owner   text NOT NULL,   -- the owner cell as written
    digest  text NOT NULL,   -- sha1 of every sheetq cell as written (sheetq.mirror.digest)
    PRIMARY KEY (queue, task_id)
);
-- one row per mirrored queue: the token the last write put in the sheet (a named range),
-- how far the log is mirrored, when the last pass wrote
CREATE TABLE sheetq_mirror_state (
    queue        text PRIMARY KEY,
    token        text NOT NULL DEFAULT '',
    last_log_id  bigint NOT NULL DEFAULT 0,
    last_pass    timestamptz,
    last_attempt timestamptz,
    last_error   text NOT NULL DEFAULT ''
);
