-- name: alert_claim
-- Claim the queue's owed alerts for one digest (docs/design.md §9, §11), committed before
-- the send: the queue's claim row says "sending until T" (the server's clock + %(lease)s
-- seconds). Taken only when failures are owed and no other run's claim holds (its `until`
-- passed: its send ended without a mark, and its alerts are owed again). Returns the owed
-- tasks (at most %(limit)s, oldest failure first) when the claim is this run's, else
-- nothing. %(queue)s, %(owner)s, %(lease)s, %(limit)s, %(ws)s.
WITH owed AS (
    SELECT t.task_id, btrim(t.type, %(ws)s) AS type, lower(btrim(t.error_class, %(ws)s))
               AS error_class, t.retry_count, t.last_error, btrim(t.owner, %(ws)s) AS owner,
           t.updated_at
    FROM sheetq_tasks AS t
    WHERE t.queue = %(queue)s AND t.status = 'failed' AND t.alerted_at IS NULL
    ORDER BY t.updated_at, t.task_id
    LIMIT %(limit)s
),
taken AS (
    INSERT INTO sheetq_alert_claims AS c (queue, owner, claimed_at, until)
    SELECT %(queue)s, %(owner)s, clock_timestamp(),
           clock_timestamp() + make_interval(secs => %(lease)s)
    WHERE EXISTS (SELECT 1 FROM owed)
    ON CONFLICT (queue) DO UPDATE
        SET owner = EXCLUDED.owner, claimed_at = EXCLUDED.claimed_at, until = EXCLUDED.until
        WHERE c.until <= EXCLUDED.claimed_at
    RETURNING until
)
SELECT o.task_id, o.type, o.error_class, o.retry_count, o.last_error, o.owner,
       (SELECT until FROM taken) AS until
FROM owed AS o
WHERE EXISTS (SELECT 1 FROM taken)
ORDER BY o.updated_at, o.task_id;

-- name: alert_holder
-- The run whose claim on the queue's alerts still holds (none: no run is sending).
SELECT c.owner, c.until FROM sheetq_alert_claims AS c
WHERE c.queue = %(queue)s AND c.until > clock_timestamp();

-- name: alert_mark
-- After a delivered digest: `alerted_at` on each covered task still owed, an `alerted` log
-- row each, and this run's claim let go, in one statement. %(queue)s, %(owner)s, %(ids)s
-- text[], %(now)s, %(run_id)s, %(ws)s. Returns how many tasks were marked.
WITH locked AS (  -- in queue order, as requeue and archive lock: no deadlock between them
    SELECT t.task_id FROM sheetq_tasks AS t
    WHERE t.queue = %(queue)s AND t.task_id = ANY(%(ids)s::text[])
      AND t.status = 'failed' AND t.alerted_at IS NULL
    ORDER BY t.created_at, t.task_id
    FOR UPDATE OF t
),
marked AS (
    UPDATE sheetq_tasks AS t SET alerted_at = %(now)s
    FROM locked AS l
    WHERE t.queue = %(queue)s AND t.task_id = l.task_id
    RETURNING t.task_id, btrim(t.type, %(ws)s) AS type, t.retry_count
),
logged AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message, run_id)
    SELECT %(queue)s, %(now)s, m.task_id, m.type, 'alerted', 'failed', m.retry_count,
           'failure alert sent', %(run_id)s
    FROM marked AS m ORDER BY m.task_id
),
released AS (
    DELETE FROM sheetq_alert_claims WHERE queue = %(queue)s AND owner = %(owner)s
)
SELECT count(*) AS n FROM marked;

-- name: alert_release
-- Let this run's claim go without marking anything (the digest was not delivered: the
-- alerts stay owed and the next run tries again). %(queue)s, %(owner)s.
DELETE FROM sheetq_alert_claims WHERE queue = %(queue)s AND owner = %(owner)s;

-- name: alert_owed_count
-- Failed tasks whose alert is still owed.
SELECT count(*) AS n FROM sheetq_tasks
WHERE queue = %(queue)s AND status = 'failed' AND alerted_at IS NULL;
