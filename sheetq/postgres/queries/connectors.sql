-- Connectors (docs/design.md §13): what `sheetq connector list|pause|resume` and `status`
-- read and change, the pauses that end on their own, and the connectors' owed alerts. The
-- claim and the outcomes' effects are in run.sql; the table and sheetq_connector_outcome
-- in migration 0005.

-- name: connector_rows
-- Every connector row of the queue (a connector that never needed one has none: closed).
SELECT name, state, until, reason, failures, probe, probe_until, next_at, slots, opened_at,
       last_error, updated_at
FROM sheetq_connectors WHERE queue = %(queue)s ORDER BY name;

-- name: connector_counts
-- Per type of %(types)s: tasks running under a live lease, and tasks due now.
SELECT type,
       count(*) FILTER (WHERE status = 'processing' AND lease_until > %(now)s) AS running,
       count(*) FILTER (WHERE status IN ('pending', 'retry')
                        AND greatest(created_at, next_retry_at) <= %(now)s) AS waiting
FROM sheetq_tasks
WHERE queue = %(queue)s AND status IN ('processing', 'pending', 'retry')
  AND type = ANY(%(types)s::text[])
GROUP BY type;

-- name: connector_pause
-- A person's pause of %(name)s until %(until)s (NULL: until resumed), with %(reason)s;
-- logged `paused` (task_id empty, type = the connector).
WITH c AS (
    INSERT INTO sheetq_connectors AS s (queue, name, state, until, reason, updated_at)
    VALUES (%(queue)s, %(name)s, 'paused', %(until)s, %(reason)s, %(now)s)
    ON CONFLICT (queue, name) DO UPDATE SET state = 'paused', until = %(until)s,
        reason = %(reason)s, updated_at = %(now)s
    RETURNING s.name, s.state
), logged AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
                            run_id)
    SELECT %(queue)s, %(now)s, '', c.name, 'paused', c.state, 0, %(message)s, %(run)s FROM c
)
SELECT name FROM c;

-- name: connector_resume
-- A person's resume of %(name)s: closed, the streak and any probe forgotten, whatever the
-- state was; logged `resumed`; a connector that was open owes its "closed" alert, unless
-- its opening was never told (then it owes nothing, as on a sheet).
WITH was AS MATERIALIZED (
    SELECT name, state FROM sheetq_connectors WHERE queue = %(queue)s AND name = %(name)s
), c AS (
    UPDATE sheetq_connectors AS s SET state = 'closed', until = NULL, reason = '',
        failures = 0, probe = '', probe_until = NULL, opened_at = NULL, escalated = false,
        alert_owed = CASE WHEN s.state NOT IN ('open', 'half-open') THEN s.alert_owed
                          WHEN s.alert_owed = 'opened' THEN ''
                          ELSE 'closed' END,
        updated_at = %(now)s
    FROM was
    WHERE s.queue = %(queue)s AND s.name = was.name
    RETURNING s.name, was.state AS was
), logged AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
                            run_id)
    SELECT %(queue)s, %(now)s, '', c.name, 'resumed', 'closed', 0,
           'resumed from ' || c.was
           || CASE WHEN %(reason)s <> '' THEN ': ' || %(reason)s ELSE '' END, %(run)s
    FROM c
)
SELECT was FROM c;

-- name: connector_tick
-- Pauses whose time ran out end: closed, logged `resumed` (run %(run)s noticed).
WITH c AS (
    UPDATE sheetq_connectors SET state = 'closed', until = NULL, reason = '',
        updated_at = sheetq_now()
    WHERE queue = %(queue)s AND state = 'paused' AND until <= sheetq_now()
    RETURNING name
)
INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message, run_id)
SELECT %(queue)s, sheetq_now(), '', c.name, 'resumed', 'closed', 0, 'the pause ended', %(run)s
FROM c;

-- name: connector_alerts
-- Take the connectors' owed alerts (each taken by one sender only): those owed by a
-- transition (opened, closed), and connectors open for longer than their escalate_after
-- (%(names)s, %(escalate)s: seconds) not yet escalated. Returns what to say, with how many
-- tasks of its types (%(types)s calling %(members)s) wait; a send that fails gives them
-- back (`connector_alerts_back`).
WITH esc AS (
    SELECT x.name FROM unnest(%(names)s::text[], %(escalate)s::float8[]) AS x(name, after)
    JOIN sheetq_connectors AS s ON s.queue = %(queue)s AND s.name = x.name
    WHERE s.state IN ('open', 'half-open') AND NOT s.escalated
      AND s.opened_at <= sheetq_now() - make_interval(secs => x.after)
), owed AS MATERIALIZED (
    SELECT s.name, CASE WHEN s.name IN (SELECT name FROM esc) AND s.alert_owed <> 'closed'
                        THEN 'escalated' ELSE s.alert_owed END AS kind
    FROM sheetq_connectors AS s
    WHERE s.queue = %(queue)s AND (s.alert_owed <> '' OR s.name IN (SELECT name FROM esc))
    FOR UPDATE
), taken AS (
    UPDATE sheetq_connectors AS s SET
        alert_owed = '',
        escalated = s.escalated OR o.kind = 'escalated'
    FROM owed AS o
    WHERE s.queue = %(queue)s AND s.name = o.name
    RETURNING s.name, o.kind, s.state, s.until, s.reason, s.last_error, s.opened_at
)
SELECT taken.*, sheetq_now() AS now,
       (SELECT count(*) FROM sheetq_tasks AS t
        WHERE t.queue = %(queue)s AND t.status IN ('pending', 'retry')
          AND t.type = ANY(ARRAY(SELECT m.type FROM unnest(%(types)s::text[],
                                                           %(members)s::text[])
                                     AS m(type, connector) WHERE m.connector = taken.name)))
       AS waiting
FROM taken WHERE kind <> '' ORDER BY name;

-- name: connector_alerts_back
-- A connector alert that could not be sent is owed again (unless a newer one is owed).
UPDATE sheetq_connectors SET alert_owed = %(kind)s,
    escalated = CASE WHEN %(kind)s = 'escalated' THEN false ELSE escalated END
WHERE queue = %(queue)s AND name = %(name)s AND alert_owed = '';
