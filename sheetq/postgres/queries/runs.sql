-- name: run_announce
-- A `sheetq worker` or `sheetq process` run says it lives (docs/design.md §11 "A gone worker
-- is named"): it takes the session-level advisory lock derived from its run id (its lease
-- owner) on this connection, which it holds until the session ends, and records where it
-- runs. Runs of the queue that are gone and hold no task any more are forgotten.
-- %(run_id)s, %(queue)s, %(kind)s (worker | process), %(host)s, %(pid)s. Returns whether
-- the lock was taken (false: a session of this run still holds it).
WITH locked AS (
    SELECT pg_try_advisory_lock(hashtextextended(%(run_id)s, 0)) AS got
),
swept AS (
    DELETE FROM sheetq_runs AS r
    WHERE r.queue = %(queue)s AND r.run_id <> %(run_id)s AND sheetq_run_gone(r.lock_key)
      AND NOT EXISTS (
          SELECT 1 FROM sheetq_tasks AS t
          WHERE t.queue = r.queue AND t.status = 'processing' AND t.lease_owner = r.run_id)
),
noted AS (
    INSERT INTO sheetq_runs (run_id, queue, kind, host, pid, lock_key)
    SELECT %(run_id)s, %(queue)s, %(kind)s, %(host)s, %(pid)s, hashtextextended(%(run_id)s, 0)
    FROM locked
    ON CONFLICT (run_id) DO NOTHING
)
SELECT got FROM locked;

-- name: held_by_runs
-- The queue's processing tasks by the run that holds them and type: how many, their latest
-- lease (`unreadable`: a task without one), whether that lease has ended at %(now)s, and
-- the run's host and pid and whether its session is gone (NULL: the run never said it
-- lived). %(queue)s, %(now)s, %(ws)s.
SELECT t.lease_owner AS run_id, btrim(t.type, %(ws)s) AS type, count(*) AS n,
       max(t.lease_until) AS lease_until, bool_or(t.lease_until IS NULL) AS unreadable,
       r.kind, r.host, r.pid,
       CASE WHEN r.run_id IS NULL THEN NULL ELSE sheetq_run_gone(r.lock_key) END AS gone
FROM sheetq_tasks AS t
LEFT JOIN sheetq_runs AS r ON r.run_id = t.lease_owner
WHERE t.queue = %(queue)s AND t.status = 'processing'
GROUP BY t.lease_owner, btrim(t.type, %(ws)s), r.run_id, r.kind, r.host, r.pid, r.lock_key
ORDER BY t.lease_owner, 2;

-- name: task_holder
-- The run that holds each named processing task, where it runs and whether its session is
-- gone (docs/design.md §11 "A gone worker is named"). %(queue)s, %(ids)s text[].
SELECT t.task_id, t.lease_owner, t.lease_until, r.kind, r.host, r.pid,
       sheetq_run_gone(r.lock_key) AS gone
FROM sheetq_tasks AS t
JOIN sheetq_runs AS r ON r.run_id = t.lease_owner
WHERE t.queue = %(queue)s AND t.task_id = ANY(%(ids)s::text[]) AND t.status = 'processing';
