-- The run path of `sheetq process` and `sheetq worker` (docs/design.md §5, §11): claim,
-- settle, recover, expire. Every time is the server's (sheetq_now(), migration 0004).

-- name: server_now
-- The database's time for this session (sheetq_now()): what leases and due times use.
SELECT sheetq_now() AS now;

-- name: pin_clock
-- A test clock (SHEETQ_NOW): this transaction's sheetq_now() is %(at)s (an offset from
-- the server's now(), local to the transaction).
SELECT set_config('sheetq.offset', (%(at)s::timestamptz - now())::text, true);

-- name: claim
-- Claim up to %(limit)s due tasks for run %(run)s, longest due first, in one statement:
-- lock them (FOR UPDATE SKIP LOCKED: a task locked by another claim is skipped, never
-- claimed twice), write the lease (now + the longest `lease` + every claimed task's
-- `timeout`) and their `claimed` log rows. %(types)s, %(leases)s, %(timeouts)s,
-- %(max_ages)s (seconds; NULL: none), %(connectors)s: the runnable types and the connector
-- each calls. A task past its type's max_age is left to `expire`. A task whose idempotency
-- key another task holds in sheetq_keys (a loser `sheetq migrate` brought over) is skipped
-- as a duplicate naming the holder, never claimed. Returns the claimed and skipped rows
-- (unordered: `priority` and `due_at` give the order), each with `previous` (its status
-- before), `loser`, `priority`, `connector`, `probe` (the one task a half-open breaker lets
-- through), `failures` (its connector's streak as this claim saw it) and `now`.
-- docs/design.md §14: highest priority first, then longest due, then task_id.
--
-- Connectors (docs/design.md §13; %(con_names)s; %(con_interval)s: seconds between two
-- starts, the rate limit, NULL: none; %(con_slots)s: concurrency, NULL: none). A connector is
--   free     no limit and its breaker closed: its tasks are claimed as they always were
--            (the `levels`/`due` CTEs), at the cost of reading its sheetq_connectors row;
--   blocked  open, paused, or half-open with its probe out: its tasks are not read at all,
--            keep their status and attempts, and hold no lease;
--   waiting  limits, and the snapshot shows no token or no free slot: likewise (so claims
--            do not queue on its row while it has nothing to give);
--   gated    a rate limit or a concurrency, or a probe due: its tasks are read in a
--            lateral of their own per type (`gated_due`, sheetq_tasks_due_by_type), its row
--            is locked (`locked`: FOR UPDATE SKIP LOCKED, which returns the row's LATEST
--            version even when another claim committed after this statement's snapshot; a
--            row another claim holds is skipped for this turn), and only as many are
--            claimed as its token (one start per interval) and free slots (or its one probe)
--            allow (`granted`); the rest stay waiting, unleased, untouched. The bucket and
--            the slots live in that row (`took`), so the row lock is the whole
--            serialisation across workers.
WITH RECURSIVE cfg AS (
    SELECT * FROM unnest(%(types)s::text[], %(leases)s::float8[], %(timeouts)s::float8[],
                         %(max_ages)s::float8[], %(connectors)s::text[])
        AS c(type, lease, timeout, max_age, connector)
), con AS (
    -- §13: each connector's mode as this statement's snapshot sees it (primary-key reads)
    SELECT x.name, x.every, x.slots, coalesce(s.failures, 0) AS failures,
           CASE
               WHEN s.state IN ('open', 'paused')
                    AND (s.until IS NULL OR s.until > sheetq_now()) THEN 'blocked'
               WHEN s.state = 'half-open' AND s.probe_until > sheetq_now() THEN 'blocked'
               WHEN s.state IN ('open', 'half-open') THEN 'probe'
               -- no token or no free slot as the snapshot sees it: not worth the row lock
               -- (stale only ever toward "try": the locked row decides)
               WHEN x.every IS NOT NULL AND s.next_at > sheetq_now() THEN 'waiting'
               WHEN x.slots IS NOT NULL
                    AND (SELECT count(*) FROM jsonb_each_text(s.slots) AS z(task, until)
                         WHERE z.until::float8 > extract(epoch FROM sheetq_now())) >= x.slots
                   THEN 'waiting'
               WHEN x.every IS NOT NULL OR x.slots IS NOT NULL THEN 'gated'
               ELSE 'free'
           END AS mode
    FROM unnest(%(con_names)s::text[], %(con_interval)s::float8[], %(con_slots)s::integer[])
        AS x(name, every, slots)
    LEFT JOIN sheetq_connectors AS s ON s.queue = %(queue)s AND s.name = x.name
), levels AS (
    -- §14: the priorities that waiting tasks have, highest first, one probe of
    -- sheetq_tasks_due each (a skip scan): `due` then reads each priority's due tasks up to
    -- now and stops, so delayed tasks are never read, whatever their priority (§11). Each
    -- priority locks at most %(limit)s rows; those the final LIMIT leaves are let go at commit
    (SELECT t.priority FROM sheetq_tasks AS t
     WHERE t.queue = %(queue)s AND t.status IN ('pending', 'retry') AND NOT t.held
     ORDER BY t.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT t.priority FROM sheetq_tasks AS t
            WHERE t.queue = %(queue)s AND t.status IN ('pending', 'retry') AND NOT t.held
              AND t.priority < l.priority
            ORDER BY t.priority DESC LIMIT 1)
    FROM levels AS l WHERE l.priority IS NOT NULL
), due AS (
    -- tasks of free connectors (§13): as before connectors existed
    SELECT d.* FROM levels AS l CROSS JOIN LATERAL (
        SELECT t.task_id, t.type, t.status, t.idempotency_key, t.next_retry_at, t.priority,
               greatest(t.created_at, t.next_retry_at) AS due_at, NULL::text AS connector
        FROM sheetq_tasks AS t
        -- NOT held: §14, a task waiting behind an earlier one of its group (migration 6)
        WHERE t.queue = %(queue)s AND t.status IN ('pending', 'retry') AND NOT t.held
          AND t.priority = l.priority
          AND greatest(t.created_at, t.next_retry_at) <= sheetq_now()
          AND t.type = ANY(ARRAY(SELECT c.type FROM cfg AS c
                                 JOIN con AS n ON n.name = c.connector
                                 WHERE n.mode = 'free'))
          AND NOT EXISTS (
              SELECT 1 FROM cfg AS c WHERE c.type = t.type AND c.max_age IS NOT NULL
              AND greatest(t.created_at, t.next_retry_at)
                  < sheetq_now() - make_interval(secs => c.max_age))
        ORDER BY greatest(t.created_at, t.next_retry_at), t.task_id
        LIMIT %(limit)s
        FOR UPDATE OF t SKIP LOCKED
    ) AS d
    WHERE l.priority IS NOT NULL
    ORDER BY d.priority DESC, d.due_at, d.task_id
    LIMIT %(limit)s
), gated_due AS (
    -- §13: tasks of gated connectors, per connector at most what it could grant at all;
    -- per type of it, a seek on sheetq_tasks_due_by_type (its own waiting tasks in claim
    -- order, never a walk past other types' waiting tasks)
    SELECT g.* FROM con AS n CROSS JOIN LATERAL (
        SELECT d.* FROM cfg AS c CROSS JOIN LATERAL (
            SELECT t.task_id, t.type, t.status, t.idempotency_key, t.next_retry_at,
                   t.priority, greatest(t.created_at, t.next_retry_at) AS due_at,
                   n.name AS connector
            FROM sheetq_tasks AS t
            WHERE t.queue = %(queue)s AND t.type = c.type AND t.status IN ('pending', 'retry')
              AND NOT t.held
              AND greatest(t.created_at, t.next_retry_at) <= sheetq_now()
              AND (c.max_age IS NULL OR greatest(t.created_at, t.next_retry_at)
                   >= sheetq_now() - make_interval(secs => c.max_age))
            ORDER BY t.priority DESC, greatest(t.created_at, t.next_retry_at), t.task_id
            LIMIT least(%(limit)s, CASE WHEN n.mode = 'probe' OR n.every IS NOT NULL THEN 1 END,
                        n.slots)
            FOR UPDATE OF t SKIP LOCKED
        ) AS d
        WHERE c.connector = n.name
        ORDER BY d.priority DESC, d.due_at, d.task_id
        LIMIT least(%(limit)s, CASE WHEN n.mode = 'probe' OR n.every IS NOT NULL THEN 1 END,
                    n.slots)
    ) AS g
    WHERE n.mode IN ('gated', 'probe')
), picked AS MATERIALIZED (
    SELECT * FROM (SELECT * FROM due UNION ALL SELECT * FROM gated_due) AS u
    ORDER BY u.priority DESC, u.due_at, u.task_id
    LIMIT %(limit)s
), held AS MATERIALIZED (
    -- the task holding each key: a scalar subquery, so one index lookup per claimed row
    -- whatever the plan (never a join that reads every key of the queue)
    SELECT d.*, (SELECT k.task_id FROM sheetq_keys AS k
                 WHERE k.queue = %(queue)s AND k.idempotency_key = d.idempotency_key) AS holder
    FROM picked AS d
), ranked AS (
    SELECT h.*, coalesce(h.holder <> h.task_id, false) AS loser,
           row_number() OVER (PARTITION BY h.connector,
                              coalesce(h.holder <> h.task_id, false)
                              ORDER BY h.priority DESC, h.due_at, h.task_id) AS rn
    FROM held AS h
), locked AS MATERIALIZED (
    -- the gated connectors' rows, latest version, locked in name order. SKIP LOCKED: a
    -- row another claim holds is taking its token now; this claim leaves that connector
    -- for its next turn instead of queueing behind it (no claim ever waits on another)
    SELECT s.* FROM sheetq_connectors AS s
    WHERE s.queue = %(queue)s
      AND s.name IN (SELECT r.connector FROM ranked AS r WHERE r.connector IS NOT NULL
                     AND NOT r.loser)
    ORDER BY s.name
    FOR UPDATE SKIP LOCKED
), granted AS MATERIALIZED (
    -- sheetq.connectors.admits on the locked row: none while open/paused/probing, one
    -- probe when half-open, else what the token and the free slots allow
    SELECT l.name, n.every, n.slots,
           (l.state IN ('open', 'half-open')) AS probing,
           greatest(0, least(
               (SELECT count(*) FROM ranked AS r WHERE r.connector = l.name AND NOT r.loser),
               CASE
                   WHEN l.state IN ('open', 'paused')
                        AND (l.until IS NULL OR l.until > sheetq_now()) THEN 0
                   WHEN l.state IN ('open', 'half-open') THEN
                       CASE WHEN l.probe_until > sheetq_now() THEN 0 ELSE 1 END
               END,
               CASE WHEN n.every IS NULL THEN NULL
                    WHEN l.next_at > sheetq_now() THEN 0 ELSE 1 END,
               n.slots - (SELECT count(*) FROM jsonb_each_text(l.slots) AS x(task, until)
                          WHERE x.until::float8 > extract(epoch FROM sheetq_now()))
           )) AS n
    FROM locked AS l JOIN con AS n ON n.name = l.name
), keyed AS (
    SELECT r.*, coalesce(g.probing, false) AS probe FROM ranked AS r
    LEFT JOIN granted AS g ON g.name = r.connector
    WHERE r.connector IS NULL OR r.loser OR r.rn <= coalesce(g.n, 0)
), lease AS (
    SELECT sheetq_now() + make_interval(secs => coalesce(max(c.lease) + sum(c.timeout), 0))
           AS until
    FROM keyed AS k JOIN cfg AS c ON c.type = k.type
    WHERE NOT k.loser
), took AS (
    -- the token taken (the next start one interval later), the granted tasks' slots (held
    -- until their lease ends), the probe of a half-open breaker
    UPDATE sheetq_connectors AS s SET
        next_at = CASE WHEN g.every IS NULL THEN s.next_at
            ELSE sheetq_now() + make_interval(secs => g.every) END,
        slots = CASE WHEN g.slots IS NULL THEN s.slots ELSE
            coalesce((SELECT jsonb_object_agg(x.task, x.until)
                      FROM jsonb_each(s.slots) AS x(task, until)
                      WHERE x.until::text::float8 > extract(epoch FROM sheetq_now())),
                     '{}'::jsonb)
            || coalesce((SELECT jsonb_object_agg(k.task_id,
                                                 extract(epoch FROM (SELECT until FROM lease)))
                         FROM keyed AS k WHERE k.connector = g.name AND NOT k.loser),
                        '{}'::jsonb) END,
        state = CASE WHEN g.probing THEN 'half-open' ELSE s.state END,
        probe = CASE WHEN g.probing THEN (SELECT min(k.task_id) FROM keyed AS k
                                         WHERE k.connector = g.name AND NOT k.loser)
                     ELSE s.probe END,
        probe_until = CASE WHEN g.probing THEN (SELECT until FROM lease) ELSE s.probe_until END,
        updated_at = sheetq_now()
    FROM granted AS g
    WHERE s.queue = %(queue)s AND s.name = g.name AND g.n > 0
), claimed AS (
    UPDATE sheetq_tasks AS t SET
        status = CASE WHEN k.loser THEN 'skipped' ELSE 'processing' END,
        lease_owner = CASE WHEN k.loser THEN t.lease_owner ELSE %(run)s END,
        lease_until = CASE WHEN k.loser THEN t.lease_until ELSE (SELECT until FROM lease) END,
        error_class = CASE WHEN k.loser THEN 'duplicate' ELSE t.error_class END,
        last_error = CASE WHEN k.loser
            THEN 'duplicate of ' || k.holder || ' (same idempotency key, created earlier)'
            ELSE t.last_error END,
        next_retry_at = CASE WHEN k.loser THEN NULL ELSE t.next_retry_at END,
        updated_at = sheetq_now()
    FROM keyed AS k
    WHERE t.queue = %(queue)s AND t.task_id = k.task_id
      AND t.task_id = ANY(ARRAY(SELECT task_id FROM keyed))  -- by primary key, whatever the plan
    RETURNING t.task_id, t.type, t.payload_json, t.retry_count, t.idempotency_key, t.owner,
              t.created_at, t.lease_until, t.last_error, k.status AS previous, k.loser,
              k.due_at, k.priority, k.connector, k.probe
), logged AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
                            run_id)
    SELECT %(queue)s, sheetq_now(), c.task_id, c.type,
           CASE WHEN c.loser THEN 'skipped' ELSE 'claimed' END,
           CASE WHEN c.loser THEN 'skipped' ELSE 'processing' END,
           c.retry_count,
           CASE WHEN c.loser THEN c.last_error ELSE 'attempt ' || (c.retry_count + 1) END,
           %(run)s
    FROM claimed AS c
)
SELECT c.*, coalesce(n.failures, 0) AS failures, sheetq_now() AS now
FROM claimed AS c LEFT JOIN cfg AS f ON f.type = c.type
LEFT JOIN con AS n ON n.name = f.connector;

-- name: connectors_ensure
-- A row for each connector that takes tokens or slots (%(names)s), so a claim has a row to
-- lock; existing rows are left as they are.
INSERT INTO sheetq_connectors (queue, name)
SELECT %(queue)s, x.name FROM unnest(%(names)s::text[]) AS x(name)
ON CONFLICT DO NOTHING;

-- name: connector_outcomes
-- Finished and returned tasks' effects on their connectors, in connector-name order (the
-- same lock order as the claim): sheetq_connector_outcome (migration 0005) per task.
SELECT sheetq_connector_outcome(%(queue)s, v.name, v.task_id, v.kind, v.threshold,
                                v.cooldown, v.error, %(run)s)
FROM unnest(%(names)s::text[], %(ids)s::text[], %(kinds)s::text[], %(thresholds)s::integer[],
            %(cooldowns)s::float8[], %(errors)s::text[]) WITH ORDINALITY
    AS v(name, task_id, kind, threshold, cooldown, error, n)
ORDER BY v.name, v.n;

-- name: connector_next
-- When the next token of a rate-limited connector (%(con_names)s with %(con_interval)s) that
-- is closed and has due tasks of its types (%(types)s, %(connectors)s) comes: NULL when none
-- waits on a token.
SELECT min(s.next_at) AS next_at, sheetq_now() AS now
FROM unnest(%(con_names)s::text[], %(con_interval)s::float8[]) AS n(name, every)
JOIN sheetq_connectors AS s ON s.queue = %(queue)s AND s.name = n.name
WHERE n.every IS NOT NULL AND s.next_at > sheetq_now()
  AND (s.state = 'closed' OR (s.state = 'paused' AND s.until <= sheetq_now()))
  AND EXISTS (
      SELECT 1 FROM sheetq_tasks AS t
      WHERE t.queue = %(queue)s AND t.status IN ('pending', 'retry')
        AND greatest(t.created_at, t.next_retry_at) <= sheetq_now()
        AND t.type = ANY(ARRAY(SELECT c.type FROM unnest(%(types)s::text[],
                                                         %(connectors)s::text[])
                                   AS c(type, connector) WHERE c.connector = n.name)));

-- name: peek
-- What `claim` would take now (a dry run), in its order: nothing locked, nothing written.
SELECT t.task_id, t.type, t.payload_json, t.retry_count, t.idempotency_key, t.owner,
       t.created_at, t.status AS previous, sheetq_now() AS now
FROM sheetq_tasks AS t
WHERE t.queue = %(queue)s AND t.status IN ('pending', 'retry') AND NOT t.held
  AND greatest(t.created_at, t.next_retry_at) <= sheetq_now()
  AND t.type = ANY(%(types)s::text[])
ORDER BY t.priority DESC, greatest(t.created_at, t.next_retry_at), t.task_id
LIMIT %(limit)s;

-- name: settle
-- Write finished outcomes, releases and recoveries, each fenced: a row changes only while
-- it is still `processing` under the lease named in %(fences)s (this run's id for its own
-- outcomes; the dead run's for a recovery), with its log row (%(events)s, %(messages)s)
-- in the same statement. %(release)s: give back unstarted (status back, attempts, due
-- time and error kept). %(retry_in)s: seconds from now to next_retry_at (NULL: none; to
-- the second, as a person reads it).
-- %(results)s NULL keeps the result. %(owners)s fills an empty owner. Returns the
-- ordinal (1-based) of every outcome that landed.
-- A worker's turn runs this statement and `claim` as ONE statement (`settle_and_claim`,
-- sheetq/postgres/queries.py): their CTE names must differ (here v, s, settled_log).
WITH v AS (
    SELECT * FROM unnest(
        %(ids)s::text[], %(fences)s::text[], %(release)s::boolean[], %(statuses)s::text[],
        %(retry_counts)s::integer[], %(retry_in)s::float8[], %(error_classes)s::text[],
        %(errors)s::text[], %(results)s::text[], %(owners)s::text[], %(events)s::text[],
        %(messages)s::text[], %(durations)s::integer[])
        WITH ORDINALITY AS v(task_id, fence, release, status, retry_count, retry_in,
                             error_class, last_error, result, owner, event, message,
                             duration_ms, n)
), s AS (
    UPDATE sheetq_tasks AS t SET
        status = v.status,
        retry_count = CASE WHEN v.release THEN t.retry_count ELSE v.retry_count END,
        next_retry_at = CASE WHEN v.release THEN t.next_retry_at
            WHEN v.retry_in IS NULL THEN NULL
            ELSE date_trunc('second', sheetq_now() + make_interval(secs => v.retry_in)) END,
        error_class = CASE WHEN v.release THEN t.error_class ELSE v.error_class END,
        last_error = CASE WHEN v.release THEN t.last_error ELSE v.last_error END,
        result = coalesce(v.result, t.result),
        alerted_at = CASE WHEN v.status = 'failed' AND NOT v.release THEN NULL
            ELSE t.alerted_at END,
        owner = CASE WHEN t.owner = '' THEN v.owner ELSE t.owner END,
        lease_owner = '',
        lease_until = NULL,
        updated_at = sheetq_now()
    FROM v
    WHERE t.queue = %(queue)s AND t.task_id = ANY(%(ids)s::text[]) AND t.task_id = v.task_id
      AND t.status = 'processing' AND t.lease_owner = v.fence
    RETURNING t.task_id, t.type, t.retry_count, v.n
), settled_log AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
                            run_id, duration_ms)
    SELECT %(queue)s, sheetq_now(), s.task_id, s.type, v.event, v.status, s.retry_count,
           v.message, %(run)s, v.duration_ms
    FROM s JOIN v ON v.n = s.n ORDER BY v.n
)
SELECT s.n FROM s ORDER BY s.n;

-- name: refuse
-- Of outcomes `settle` did not land: those whose own log row is the task's last one (a
-- commit cut off with the connection that had in fact landed) are returned as landed;
-- the others (%(refuse)s: a finished attempt, not a release) get one `outcome_refused`
-- log row with the task's current status and attempts; newer state is never written
-- over. %(ids)s, %(events)s, %(statuses)s (what the attempt said), %(messages)s,
-- %(retry_counts)s, %(durations)s: the outcomes. Returns the ordinals found landed.
WITH v AS (
    SELECT * FROM unnest(%(ids)s::text[], %(refuse)s::boolean[], %(events)s::text[],
                         %(statuses)s::text[], %(messages)s::text[],
                         %(retry_counts)s::integer[], %(durations)s::integer[])
        WITH ORDINALITY AS v(task_id, refuse, event, status, message, retry_count,
                             duration_ms, n)
), last AS (
    SELECT DISTINCT ON (l.task_id) l.task_id, l.run_id, l.event, l.status, l.retry_count,
           l.message
    FROM sheetq_log AS l
    WHERE l.queue = %(queue)s AND l.task_id = ANY(%(ids)s::text[])
    ORDER BY l.task_id, l.id DESC
), landed AS (
    SELECT v.n FROM v JOIN last ON last.task_id = v.task_id AND last.run_id = %(run)s
        AND last.event = v.event AND last.status = v.status AND last.message = v.message
), refused AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
                            run_id, duration_ms)
    SELECT %(queue)s, sheetq_now(), t.task_id, t.type, 'outcome_refused', t.status,
           t.retry_count,
           left('late outcome refused: this run''s lease had expired and '
               || CASE WHEN t.lease_owner <> '' THEN 'run ' || t.lease_owner || ' holds it now'
                       ELSE 'another run recovered it' END
               || '; the attempt said ' || v.status || ' (' || v.event || '): ' || v.message,
               %(max_chars)s),
           %(run)s, v.duration_ms
    FROM v JOIN sheetq_tasks AS t ON t.queue = %(queue)s AND t.task_id = v.task_id
        AND t.task_id = ANY(%(ids)s::text[])
    WHERE v.refuse AND v.n NOT IN (SELECT n FROM landed)
    ORDER BY v.n
)
SELECT n FROM landed ORDER BY n;

-- name: end_lease
-- SIGINT/SIGTERM while a handler ran: the task's lease ends now (still this run's), so
-- the next claimer recovers it per on_unknown at once.
UPDATE sheetq_tasks SET lease_until = sheetq_now()
WHERE queue = %(queue)s AND task_id = %(task_id)s AND status = 'processing'
  AND lease_owner = %(run)s;

-- name: expired_leases
-- Lock up to %(limit)s `processing` tasks of %(types)s whose lease ran out (their run
-- died): the run recovers them per on_unknown. Types no run here is configured for are
-- left alone (docs/design.md §11 "A run recovers only what it is configured for").
SELECT t.task_id, t.type, t.payload_json, t.retry_count, t.idempotency_key, t.owner,
       t.created_at, t.lease_owner, sheetq_now() AS now
FROM sheetq_tasks AS t
WHERE t.queue = %(queue)s AND t.status = 'processing'
  AND (t.lease_until IS NULL OR t.lease_until <= sheetq_now())
  AND t.type = ANY(%(types)s::text[])
ORDER BY t.lease_until NULLS FIRST, t.created_at, t.task_id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: reclaim
-- Recovered tasks whose type reconciles (%(ids)s, locked by `expired_leases`): this run
-- holds them now, for %(seconds)s, to ask the reconcile check; logged `claimed`.
WITH c AS (
    UPDATE sheetq_tasks AS t SET lease_owner = %(run)s,
        lease_until = sheetq_now() + make_interval(secs => %(seconds)s),
        updated_at = sheetq_now()
    WHERE t.queue = %(queue)s AND t.task_id = ANY(%(ids)s::text[])
      AND t.status = 'processing'
    RETURNING t.task_id, t.type, t.retry_count, t.lease_until
), logged AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
                            run_id)
    SELECT %(queue)s, sheetq_now(), c.task_id, c.type, 'claimed', 'processing',
           c.retry_count, 'reconciling a lost outcome', %(run)s
    FROM c ORDER BY array_position(%(ids)s::text[], c.task_id)
)
SELECT task_id, lease_until FROM c;

-- name: too_old
-- Lock up to %(limit)s waiting tasks of %(types)s due for longer than their type's
-- max_age (%(max_ages)s, seconds) at the server's time; `expire` fails them.
SELECT t.task_id, t.type, t.retry_count, t.owner,
       greatest(t.created_at, t.next_retry_at) AS due_since, sheetq_now() AS now
FROM sheetq_tasks AS t
JOIN unnest(%(types)s::text[], %(max_ages)s::float8[]) AS c(type, max_age) ON c.type = t.type
WHERE t.queue = %(queue)s AND t.status IN ('pending', 'retry')
  AND greatest(t.created_at, t.next_retry_at)
      < sheetq_now() - make_interval(secs => %(shortest)s)
  AND greatest(t.created_at, t.next_retry_at) < sheetq_now() - make_interval(secs => c.max_age)
ORDER BY greatest(t.created_at, t.next_retry_at), t.task_id
LIMIT %(limit)s
FOR UPDATE OF t SKIP LOCKED;

-- name: expire
-- Fail the waiting tasks `too_old` locked (error_class `expired`, without running them),
-- each with its message (%(messages)s) and owner to fill (%(owners)s), logged `expired`.
WITH v AS (
    SELECT * FROM unnest(%(ids)s::text[], %(messages)s::text[], %(owners)s::text[])
        WITH ORDINALITY AS v(task_id, message, owner, n)
), e AS (
    UPDATE sheetq_tasks AS t SET status = 'failed', error_class = 'expired',
        last_error = v.message, next_retry_at = NULL, alerted_at = NULL,
        owner = CASE WHEN t.owner = '' THEN v.owner ELSE t.owner END,
        updated_at = sheetq_now()
    FROM v
    WHERE t.queue = %(queue)s AND t.task_id = ANY(%(ids)s::text[]) AND t.task_id = v.task_id
      AND t.status IN ('pending', 'retry')
    RETURNING t.task_id, t.type, t.retry_count, v.message, v.n
), logged AS (
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
                            run_id)
    SELECT %(queue)s, sheetq_now(), e.task_id, e.type, 'expired', 'failed', e.retry_count,
           e.message, %(run)s
    FROM e ORDER BY e.n
)
SELECT count(*) AS n FROM e;

-- name: without_handler
-- Waiting tasks whose type has no handler (%(handled)s: the types that have one), by
-- type; only %(types)s when that is not empty (docs/design.md §3).
SELECT type, count(*) AS n FROM sheetq_tasks
WHERE queue = %(queue)s AND status IN ('pending', 'retry')
  AND NOT (type = ANY(%(handled)s::text[]))
  AND (cardinality(%(types)s::text[]) = 0 OR type = ANY(%(types)s::text[]))
GROUP BY type;
