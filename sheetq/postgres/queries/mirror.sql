-- name: mirror_state
-- The mirror's state of one queue (sheetq_mirror_state), no row before the first pass:
-- the token of the last write that landed in the sheet, the last log id mirrored, when
-- the last pass wrote and the last one tried, and its failure. %(queue)s.
SELECT token, last_log_id, last_pass, last_attempt, last_error
FROM sheetq_mirror_state
WHERE queue = %(queue)s;

-- name: mirror_window
-- The window the sheet shows (docs/design.md §12) as the §2 cell texts
-- (sheetq_task_cells), in queue order: the open tasks (%(open)s text[]) and the finished
-- ones changed since %(since)s. %(queue)s.
SELECT c.*
FROM sheetq_tasks AS t CROSS JOIN LATERAL sheetq_task_cells(t) AS c
WHERE t.queue = %(queue)s
  AND (t.status = ANY(%(open)s::text[]) OR t.updated_at >= %(since)s)
ORDER BY t.created_at, t.task_id;

-- name: mirror_tasks
-- Some tasks (%(ids)s text[]) as the cell texts of `mirror_window`, in queue order, each
-- locked (FOR UPDATE) until the transaction ends: the managers' edits are planned from
-- them and applied in the same transaction. %(queue)s.
SELECT c.*
FROM sheetq_tasks AS t CROSS JOIN LATERAL sheetq_task_cells(t) AS c
WHERE t.queue = %(queue)s AND t.task_id = ANY(%(ids)s::text[])
ORDER BY t.created_at, t.task_id
FOR UPDATE OF t;

-- name: mirror_written
-- What the mirror last wrote into each task's row: its status cell, its owner cell and the
-- digest of all its sheetq cells. %(queue)s.
SELECT task_id, status, owner, digest
FROM sheetq_mirror
WHERE queue = %(queue)s;

-- name: mirror_top_log_id
-- The newest log row's id of the queue (0 when it has none). %(queue)s.
SELECT coalesce(max(id), 0) AS id
FROM sheetq_log
WHERE queue = %(queue)s;

-- name: mirror_known
-- Which of %(ids)s (text[]) are tasks of the queue, live or archived. %(queue)s.
SELECT task_id FROM sheetq_tasks WHERE queue = %(queue)s AND task_id = ANY(%(ids)s::text[])
UNION
SELECT task_id FROM sheetq_archive WHERE queue = %(queue)s AND task_id = ANY(%(ids)s::text[]);

-- name: mirror_logs_since
-- The queue's log rows with an id above %(after)s, oldest first, at most %(limit)s.
-- %(queue)s.
SELECT id, ts, task_id, type, event, status, retry_count, message, run_id, duration_ms
FROM sheetq_log
WHERE queue = %(queue)s AND id > %(after)s
ORDER BY id
LIMIT %(limit)s;

-- name: mirror_requeue
-- A manager's requeue in the sheet (docs/design.md §12), as `sheetq.mirror.plan_edits`
-- planned it from the task locked by `mirror_tasks`: back to pending, due at
-- %(next_retry_at)s, its error class, alert mark and lease cleared, stamped %(updated_at)s.
-- Returns the task id (no row: the task is gone). %(queue)s, %(task_id)s, %(status)s,
-- %(error_class)s, %(alerted_at)s, %(lease_owner)s, %(lease_until)s.
UPDATE sheetq_tasks
SET status = %(status)s, next_retry_at = %(next_retry_at)s, error_class = %(error_class)s,
    alerted_at = %(alerted_at)s, lease_owner = %(lease_owner)s, lease_until = %(lease_until)s,
    updated_at = %(updated_at)s
WHERE queue = %(queue)s AND task_id = %(task_id)s
RETURNING task_id;

-- name: mirror_priority
-- A manager's priority cell saved from the sheet (docs/design.md §14), stamped
-- %(updated_at)s (no log row). Returns the task id (no row: the task is gone). %(queue)s,
-- %(task_id)s, %(priority)s.
UPDATE sheetq_tasks
SET priority = %(priority)s, updated_at = %(updated_at)s
WHERE queue = %(queue)s AND task_id = %(task_id)s
RETURNING task_id;

-- name: mirror_owner
-- A manager's owner cell saved from the sheet: the task's owner, stamped %(updated_at)s
-- (no log row). Returns the task id (no row: the task is gone). %(queue)s, %(task_id)s,
-- %(owner)s.
UPDATE sheetq_tasks
SET owner = %(owner)s, updated_at = %(updated_at)s
WHERE queue = %(queue)s AND task_id = %(task_id)s
RETURNING task_id;

-- name: mirror_log
-- One log row of a manager's edit (a `requeued` row), appended in the order planned.
-- %(queue)s and one parameter per entry of LOG_COLUMNS.
INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
    run_id, duration_ms)
VALUES (%(queue)s, %(ts)s, %(task_id)s, %(type)s, %(event)s, %(status)s, %(retry_count)s,
    %(message)s, %(run_id)s, %(duration_ms)s);

-- name: mirror_record
-- What a write put in the sheet, per task (%(ids)s, %(statuses)s, %(owners)s, %(digests)s:
-- text[] of one length): its status and owner cells and the digest of its sheetq cells.
-- %(queue)s.
INSERT INTO sheetq_mirror (queue, task_id, status, owner, digest)
SELECT %(queue)s, *
FROM unnest(%(ids)s::text[], %(statuses)s::text[], %(owners)s::text[], %(digests)s::text[])
ON CONFLICT (queue, task_id) DO UPDATE
    SET status = EXCLUDED.status, owner = EXCLUDED.owner, digest = EXCLUDED.digest;

-- name: mirror_forget
-- Rows a write deleted from the sheet (%(ids)s text[]): nothing recorded for them any
-- more. %(queue)s.
DELETE FROM sheetq_mirror
WHERE queue = %(queue)s AND task_id = ANY(%(ids)s::text[]);

-- name: mirror_landed
-- A write that landed: the token it carried and the last log id it appended (each kept as
-- it was when NULL), when the pass wrote and tried (%(now)s, kept when NULL), and no
-- failure. %(queue)s, %(token)s, %(last_log_id)s.
INSERT INTO sheetq_mirror_state AS s (queue, token, last_log_id, last_pass, last_attempt,
    last_error)
VALUES (%(queue)s, coalesce(%(token)s::text, ''), coalesce(%(last_log_id)s::bigint, 0),
    %(now)s::timestamptz, %(now)s::timestamptz, '')
ON CONFLICT (queue) DO UPDATE
    SET token = coalesce(%(token)s::text, s.token),
        last_log_id = coalesce(%(last_log_id)s::bigint, s.last_log_id),
        last_pass = coalesce(%(now)s::timestamptz, s.last_pass),
        last_attempt = coalesce(%(now)s::timestamptz, s.last_attempt),
        last_error = '';

-- name: mirror_failed
-- A pass that could not write to the sheet: when (%(now)s) and why (%(error)s, at most 500
-- characters), for `status`. %(queue)s.
INSERT INTO sheetq_mirror_state AS s (queue, last_attempt, last_error)
VALUES (%(queue)s, %(now)s, %(error)s)
ON CONFLICT (queue) DO UPDATE
    SET last_attempt = EXCLUDED.last_attempt, last_error = EXCLUDED.last_error;

-- name: mirror_pending
-- How much the sheet lags: the queue's tasks changed after %(since)s (the last pass that
-- wrote) and its log rows above %(last_log_id)s (the last one mirrored). %(queue)s.
SELECT
    (SELECT count(*) FROM sheetq_tasks
     WHERE queue = %(queue)s AND updated_at > %(since)s) AS tasks,
    (SELECT count(*) FROM sheetq_log
     WHERE queue = %(queue)s AND id > %(last_log_id)s) AS logs;
