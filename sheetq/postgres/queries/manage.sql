-- name: clock
-- The moment a command's statements stamp: %(at)s (a pretended time, SHEETQ_NOW) or, when
-- NULL, the server's clock; to the second, as every stamp sheetq writes.
SELECT date_trunc('second', coalesce(%(at)s::timestamptz, statement_timestamp())) AS now;

-- name: moment
-- The moment a report is as of: %(at)s (a pretended time) or the server's clock.
SELECT coalesce(%(at)s::timestamptz, statement_timestamp()) AS now;

-- name: requeue
-- The dead-letter redrive (docs/design.md §8), one statement: the queue's tasks matching
-- the filters back to pending, due now, each with its `requeued` log row. A task a run
-- holds (processing) is never taken; a task a run claimed while this statement waited for
-- its row lock is re-checked and left alone. Returns the tasks picked, as they were.
-- %(queue)s, %(now)s; %(ids)s, %(types)s, %(classes)s: text[] (empty: any);
-- %(statuses)s text[]; %(reset)s: attempts from zero; %(dry)s: change nothing;
-- %(run_id)s; %(ws)s: the characters Python's str.strip() removes; %(priority)s: the
-- tasks' new priority (NULL: kept; docs/design.md §14).
WITH picked AS (
    SELECT t.task_id, btrim(t.type, %(ws)s) AS type, t.status, t.retry_count,
           lower(btrim(t.error_class, %(ws)s)) AS error_class, t.created_at
    FROM sheetq_tasks AS t
    WHERE t.queue = %(queue)s
      AND (cardinality(%(ids)s::text[]) = 0 OR t.task_id = ANY(%(ids)s::text[]))
      AND t.status = ANY(%(statuses)s::text[]) AND t.status <> 'processing'
      AND (cardinality(%(types)s::text[]) = 0 OR btrim(t.type, %(ws)s) = ANY(%(types)s::text[]))
      AND (cardinality(%(classes)s::text[]) = 0
           OR lower(btrim(t.error_class, %(ws)s)) = ANY(%(classes)s::text[]))
    ORDER BY t.created_at, t.task_id
    FOR UPDATE OF t
),
changed AS (
    UPDATE sheetq_tasks AS t
    SET status = 'pending', next_retry_at = %(now)s, error_class = '', alerted_at = NULL,
        lease_owner = '', lease_until = NULL, updated_at = %(now)s,
        retry_count = CASE WHEN %(reset)s THEN 0 ELSE t.retry_count END,
        priority = coalesce(%(priority)s::integer, t.priority)
    FROM picked AS p
    WHERE NOT %(dry)s AND t.queue = %(queue)s AND t.task_id = p.task_id
    RETURNING t.task_id, p.type, p.status AS was, t.retry_count, p.created_at
),
logged AS (  -- from what the update returned: no join between the two (a plan's nested loop)
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message, run_id)
    SELECT %(queue)s, %(now)s, c.task_id, c.type, 'requeued', 'pending', c.retry_count,
           'requeued with `sheetq requeue` (was ' || c.was
               || CASE WHEN %(reset)s THEN ', attempts reset' ELSE '' END
               || CASE WHEN %(priority)s::integer IS NULL THEN ''
                       ELSE ', priority ' || %(priority)s::integer END || ')',
           %(run_id)s
    FROM changed AS c
    ORDER BY c.created_at, c.task_id
)
SELECT task_id, type, status, retry_count, error_class
FROM picked ORDER BY created_at, task_id;

-- name: skip
-- `sheetq skip`, one statement: the named pending, retry or failed tasks to skipped, each
-- with its `skipped` log row (never a processing, done or skipped one). Returns the tasks
-- picked, as they were. %(queue)s, %(now)s, %(ids)s text[], %(dry)s, %(run_id)s,
-- %(message)s (the log row's), %(error)s (last_error: the message, shortened), %(ws)s.
WITH picked AS (
    SELECT t.task_id, btrim(t.type, %(ws)s) AS type, t.status, t.retry_count,
           lower(btrim(t.error_class, %(ws)s)) AS error_class, t.created_at
    FROM sheetq_tasks AS t
    WHERE t.queue = %(queue)s AND t.task_id = ANY(%(ids)s::text[])
      AND t.status IN ('pending', 'retry', 'failed')
    ORDER BY t.created_at, t.task_id
    FOR UPDATE OF t
),
changed AS (
    UPDATE sheetq_tasks AS t
    SET status = 'skipped', next_retry_at = NULL, lease_owner = '', lease_until = NULL,
        updated_at = %(now)s, last_error = %(error)s
    FROM picked AS p
    WHERE NOT %(dry)s AND t.queue = %(queue)s AND t.task_id = p.task_id
    RETURNING t.task_id, p.type, t.retry_count, p.created_at
),
logged AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message, run_id)
    SELECT %(queue)s, %(now)s, c.task_id, c.type, 'skipped', 'skipped', c.retry_count,
           %(message)s, %(run_id)s
    FROM changed AS c
    ORDER BY c.created_at, c.task_id
)
SELECT task_id, type, status, retry_count, error_class
FROM picked ORDER BY created_at, task_id;

-- name: task_states
-- The named tasks as requeue and skip explain a refusal: status, attempts, error class,
-- the lease that holds them. %(queue)s, %(ids)s text[], %(ws)s.
SELECT t.task_id, btrim(t.type, %(ws)s) AS type, t.status, t.retry_count,
       lower(btrim(t.error_class, %(ws)s)) AS error_class, t.lease_owner, t.lease_until
FROM sheetq_tasks AS t
WHERE t.queue = %(queue)s AND t.task_id = ANY(%(ids)s::text[])
ORDER BY t.created_at, t.task_id;

-- name: archive_tasks
-- `sheetq archive --older-than`, one statement: the finished tasks (%(statuses)s) last
-- changed before %(before)s move to sheetq_archive whole, each with an `archived` log row.
-- A task id already in the archive is left in the queue and reported (`already`); a failed
-- task moved with its alert still owed is marked (`owed`: alerted_at NULL; nothing alerts
-- it once archived); keys stay in sheetq_keys, so an archived task's key still
-- deduplicates. Returns every task
-- found, in queue order. %(queue)s, %(now)s, %(before)s (a whole second: a time compares
-- as its second, as everywhere else), %(dry)s, %(run_id)s, %(message)s.
WITH found AS (
    SELECT t.*, EXISTS (
        SELECT 1 FROM sheetq_archive AS a WHERE a.queue = t.queue AND a.task_id = t.task_id
    ) AS already, (t.status = 'failed' AND t.alerted_at IS NULL) AS owed
    FROM sheetq_tasks AS t
    WHERE t.queue = %(queue)s AND t.status = ANY(%(statuses)s::text[])
      AND t.updated_at < %(before)s
    ORDER BY t.created_at, t.task_id
    FOR UPDATE OF t
),
moved AS (
    DELETE FROM sheetq_tasks AS t
    USING found AS f
    WHERE NOT %(dry)s AND NOT f.already AND t.queue = %(queue)s AND t.task_id = f.task_id
    RETURNING t.*
),
stored AS (
    INSERT INTO sheetq_archive (queue, task_id, created_at, type, payload_json, status,
        retry_count, next_retry_at, last_error, idempotency_key, updated_at, error_class,
        result, lease_owner, lease_until, payload_hash, alerted_at, owner, priority, "group")
    SELECT queue, task_id, created_at, type, payload_json, status, retry_count,
        next_retry_at, last_error, idempotency_key, updated_at, error_class, result,
        lease_owner, lease_until, payload_hash, alerted_at, owner, priority, "group"
    FROM moved
),
logged AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message, run_id)
    SELECT %(queue)s, %(now)s, m.task_id, m.type, 'archived', m.status, m.retry_count,
           %(message)s, %(run_id)s
    FROM moved AS m
    ORDER BY m.created_at, m.task_id
)
SELECT task_id, status, already, owed FROM found ORDER BY created_at, task_id;

-- name: archive_log
-- `sheetq archive --log-older-than`, one statement: the queue's log rows stamped before
-- %(before)s move to sheetq_log_archive, in log order. Returns how many.
WITH moved AS (
    DELETE FROM sheetq_log
    WHERE NOT %(dry)s AND queue = %(queue)s AND ts < %(before)s
    RETURNING *
),
stored AS (
    INSERT INTO sheetq_log_archive (queue, ts, task_id, type, event, status, retry_count,
        message, run_id, duration_ms)
    SELECT queue, ts, task_id, type, event, status, retry_count, message, run_id, duration_ms
    FROM moved ORDER BY id
)
SELECT CASE WHEN %(dry)s
    THEN (SELECT count(*) FROM sheetq_log WHERE queue = %(queue)s AND ts < %(before)s)
    ELSE (SELECT count(*) FROM moved) END AS n;
