-- name: status_groups
-- `sheetq status`'s counts by type and status, as of %(due)s (the first whole second after
-- the report's moment: a time compares as its second): per group, since when the
-- longest-due waiting task is due, retries due, failures whose alert is owed.
-- %(queue)s, %(due)s, %(ws)s.
SELECT type, status, count(*) AS n,
       min(greatest(created_at, next_retry_at)) FILTER (
           WHERE status IN ('pending', 'retry')
             AND greatest(created_at, next_retry_at) < %(due)s) AS oldest,
       count(*) FILTER (
           WHERE status = 'retry' AND (next_retry_at IS NULL OR next_retry_at < %(due)s)) AS due,
       count(*) FILTER (WHERE status = 'failed' AND alerted_at IS NULL) AS owed
FROM sheetq_tasks
WHERE queue = %(queue)s AND btrim(task_id, %(ws)s) <> ''
GROUP BY type, status;

-- name: status_priorities
-- docs/design.md §14: per priority, highest first, the due waiting tasks as of %(due)s (as
-- `status_groups` counts them): how many, and the longest-due one (then by task id). Tasks
-- of a group a failed task blocks are left out (`status_blocked_groups` shows them).
-- %(queue)s, %(due)s.
SELECT DISTINCT ON (t.priority) t.priority, t.task_id,
       greatest(t.created_at, t.next_retry_at) AS since,
       count(*) OVER (PARTITION BY t.priority) AS due
FROM sheetq_tasks AS t
WHERE t.queue = %(queue)s AND t.status IN ('pending', 'retry')
  AND greatest(t.created_at, t.next_retry_at) < %(due)s
  AND NOT (t."group" <> '' AND EXISTS (
      SELECT 1 FROM sheetq_tasks AS f
      WHERE f.queue = %(queue)s AND f."group" = t."group" AND f.status = 'failed'
        AND f.group_blocks
        AND NOT EXISTS (
            SELECT 1 FROM sheetq_tasks AS e
            WHERE e.queue = %(queue)s AND e."group" = f."group"
              AND (e.created_at, e.task_id) < (f.created_at, f.task_id)
              AND (e.status IN ('pending', 'processing', 'retry')
                   OR (e.status = 'failed' AND e.group_blocks)))))
ORDER BY t.priority DESC, greatest(t.created_at, t.next_retry_at), t.task_id;

-- name: status_blocked_groups
-- docs/design.md §14: groups held by a failed task of a type that said
-- `group_blocks_on_failure` (no earlier task of the group still holds it), by group: the
-- task, how many wait behind it and since when the longest-due of them is due (as of
-- %(due)s). %(queue)s, %(due)s.
SELECT f."group", f.task_id, f.type, f.status, f.error_class,
       w.waiting, w.oldest
FROM sheetq_tasks AS f
CROSS JOIN LATERAL (
    SELECT count(*) AS waiting,
           min(greatest(b.created_at, b.next_retry_at)) FILTER (
               WHERE greatest(b.created_at, b.next_retry_at) < %(due)s) AS oldest
    FROM sheetq_tasks AS b
    WHERE b.queue = %(queue)s AND b."group" = f."group" AND b.status IN ('pending', 'retry')
) AS w
WHERE f.queue = %(queue)s AND f.status = 'failed' AND f.group_blocks AND f."group" <> ''
  AND NOT EXISTS (
      SELECT 1 FROM sheetq_tasks AS e
      WHERE e.queue = %(queue)s AND e."group" = f."group"
        AND (e.created_at, e.task_id) < (f.created_at, f.task_id)
        AND (e.status IN ('pending', 'processing', 'retry')
             OR (e.status = 'failed' AND e.group_blocks)))
ORDER BY f."group";

-- name: list_tasks
-- `sheetq list`: the queue's tasks with one of %(statuses)s and one of %(types)s (text[];
-- empty: any), oldest first, at most %(limit)s (NULL: all).
SELECT task_id, created_at, type, payload_json, status, retry_count, next_retry_at,
       last_error, idempotency_key, updated_at, error_class, result, lease_owner,
       lease_until, payload_hash, alerted_at, owner, priority, "group"
FROM sheetq_tasks
WHERE queue = %(queue)s AND task_id <> ''
  AND (cardinality(%(statuses)s::text[]) = 0 OR status = ANY(%(statuses)s::text[]))
  AND (cardinality(%(types)s::text[]) = 0 OR type = ANY(%(types)s::text[]))
ORDER BY created_at, task_id
LIMIT %(limit)s;

-- name: show_task
-- `sheetq show`: the task in the queue (`archived` false), then in the archive (true).
SELECT false AS archived, task_id, created_at, type, payload_json, status, retry_count,
       next_retry_at, last_error, idempotency_key, updated_at, error_class, result,
       lease_owner, lease_until, payload_hash, alerted_at, owner, priority, "group"
FROM sheetq_tasks WHERE queue = %(queue)s AND task_id = %(task_id)s
UNION ALL
SELECT true, task_id, created_at, type, payload_json, status, retry_count, next_retry_at,
       last_error, idempotency_key, updated_at, error_class, result, lease_owner,
       lease_until, payload_hash, alerted_at, owner, priority, "group"
FROM sheetq_archive WHERE queue = %(queue)s AND task_id = %(task_id)s
ORDER BY 1;

-- name: show_history
-- `sheetq show`: the task's log rows, those `archive --log-older-than` moved first
-- (`archived` true), each part in log order.
SELECT * FROM (
    SELECT true AS archived, id, ts, task_id, type, event, status, retry_count, message,
           run_id, duration_ms
    FROM sheetq_log_archive WHERE queue = %(queue)s AND task_id = %(task_id)s
    UNION ALL
    SELECT false, id, ts, task_id, type, event, status, retry_count, message, run_id,
           duration_ms
    FROM sheetq_log WHERE queue = %(queue)s AND task_id = %(task_id)s
) AS h
ORDER BY archived DESC, id;

-- name: stats_groups
-- `sheetq stats`: the window's log rows (ts from %(since)s) by type, event, status and
-- hour (the session in UTC): how many, and the first one's id (the order outcomes first came in).
SELECT type, event, status, date_trunc('hour', ts) AS hour,
       count(*) AS n, min(id) AS first
FROM sheetq_log
WHERE queue = %(queue)s AND ts >= %(since)s
GROUP BY 1, 2, 3, 4;

-- name: stats_to_done
-- Enqueue-to-done seconds of each task first done in the window (the window's rows whose
-- (event, status) is one of the pairs %(ev)s × %(st)s), from its earliest `enqueued` row
-- at any time: their nearest-rank p50/p95 and how many. Types: all when %(all)s, else
-- %(types)s (as Python strips them, %(ws)s).
WITH done AS (
    SELECT btrim(l.task_id, %(ws)s) AS task, min(date_trunc('second', l.ts)) AS at
    FROM sheetq_log AS l
    WHERE l.queue = %(queue)s AND l.ts >= %(since)s
      AND (l.event, l.status) IN (SELECT * FROM unnest(%(ev)s::text[], %(st)s::text[]))
      AND (%(all)s OR btrim(l.type, %(ws)s) = ANY(%(types)s::text[]))
    GROUP BY 1
),
begun AS (
    SELECT btrim(l.task_id, %(ws)s) AS task, min(date_trunc('second', l.ts)) AS at
    FROM sheetq_log AS l
    WHERE l.queue = %(queue)s AND l.event = 'enqueued'
      AND (%(all)s OR btrim(l.type, %(ws)s) = ANY(%(types)s::text[]))
      AND btrim(l.task_id, %(ws)s) IN (SELECT task FROM done)
    GROUP BY 1
),
spans AS (
    SELECT (extract(epoch FROM d.at) - extract(epoch FROM b.at))::bigint AS s
    FROM done AS d JOIN begun AS b USING (task)
    WHERE b.at <= d.at
)
SELECT count(*) AS n,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY s) AS p50,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY s) AS p95
FROM spans;

-- name: stats_handler_ms
-- The handler durations of the window's `done` rows (pairs as stats_to_done): p50/p95, n.
SELECT count(*) AS n,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY l.duration_ms) AS p50,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY l.duration_ms) AS p95
FROM sheetq_log AS l
WHERE l.queue = %(queue)s AND l.ts >= %(since)s
  AND (l.event, l.status) IN (SELECT * FROM unnest(%(ev)s::text[], %(st)s::text[]))
  AND (%(all)s OR btrim(l.type, %(ws)s) = ANY(%(types)s::text[]))
  AND l.duration_ms IS NOT NULL;

-- name: stats_failure_classes
-- The window's failures (pairs as stats_to_done) by the error class their message starts
-- with (`logged`: one of %(classes)s followed by ": ", as sheetq.stats.logged_class reads
-- it; '' for none), and by the status and error class of the task's row in the queue,
-- else in the archive.
SELECT CASE WHEN position(': ' IN btrim(l.message, %(ws)s)) > 0
                 AND split_part(btrim(l.message, %(ws)s), ': ', 1) = ANY(%(classes)s::text[])
            THEN split_part(btrim(l.message, %(ws)s), ': ', 1) ELSE '' END AS logged,
       CASE WHEN t.task_id IS NOT NULL THEN t.status ELSE a.status END AS status,
       CASE WHEN t.task_id IS NOT NULL THEN t.error_class ELSE a.error_class END
           AS error_class,
       count(*) AS n
FROM sheetq_log AS l
LEFT JOIN sheetq_tasks AS t ON t.queue = l.queue AND t.task_id = btrim(l.task_id, %(ws)s)
LEFT JOIN sheetq_archive AS a ON a.queue = l.queue AND a.task_id = btrim(l.task_id, %(ws)s)
WHERE l.queue = %(queue)s AND l.ts >= %(since)s
  AND (l.event, l.status) IN (SELECT * FROM unnest(%(ev)s::text[], %(st)s::text[]))
  AND (%(all)s OR btrim(l.type, %(ws)s) = ANY(%(types)s::text[]))
GROUP BY 1, 2, 3;

-- name: stats_waiting
-- The oldest waiting task of each type (its creation).
SELECT type, min(created_at) AS first
FROM sheetq_tasks
WHERE queue = %(queue)s AND status IN ('pending', 'retry')
GROUP BY type;

-- name: utc_session
-- Truncations and hour buckets of this transaction in UTC, whatever the server's zone.
SET LOCAL TimeZone = 'UTC';
