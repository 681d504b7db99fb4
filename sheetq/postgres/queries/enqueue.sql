-- name: enqueue_lock
-- The queue's enqueue lock, held to the end of the transaction: two enqueues of one key
-- never check and insert at the same time (docs/design.md §4).
SELECT pg_advisory_xact_lock(hashtext('sheetq:' || %(queue)s));

-- name: known_keys
-- The tasks holding any of %(keys)s (text[]): live tasks first, then archived, each
-- group oldest first (as sheetq.accept.index_keys decides on a sheet).
SELECT idempotency_key, task_id, payload_hash, status, archived FROM (
    SELECT idempotency_key, task_id, payload_hash, status, false AS archived,
           created_at, 0 AS place
    FROM sheetq_tasks WHERE queue = %(queue)s AND idempotency_key = ANY(%(keys)s::text[])
    UNION ALL
    SELECT idempotency_key, task_id, payload_hash, status, true AS archived,
           created_at, 1 AS place
    FROM sheetq_archive WHERE queue = %(queue)s AND idempotency_key = ANY(%(keys)s::text[])
) AS holders
ORDER BY place, created_at, task_id;

-- name: insert_tasks
-- The batch's new tasks, pending, stamped %(now)s. COPY rows: task_id, type, payload_json,
-- next_retry_at, idempotency_key, payload_hash, owner, priority, group, group_blocks, held
-- (a grouped task starts held: the groups trigger of migration 6 frees its group's head;
-- the queue and times are the copy's own columns' values, below).
COPY sheetq_tasks (queue, task_id, created_at, type, payload_json, status, retry_count,
    next_retry_at, idempotency_key, updated_at, payload_hash, owner, priority, "group",
    group_blocks, held) FROM STDIN;

-- name: insert_log
-- The batch's log rows. COPY rows: queue, ts, task_id, type, event, status, retry_count,
-- message, run_id.
COPY sheetq_log (queue, ts, task_id, type, event, status, retry_count, message, run_id)
    FROM STDIN;

-- name: claim_keys
-- Record the new tasks' keys (%(keys)s, %(tasks)s, %(hashes)s: text[] in step) in
-- sheetq_keys; returns a key another task holds already (then the caller rolls back:
-- two tasks never share a key, live or archived, whatever races; docs/design.md §4, §11).
WITH wanted AS (
    SELECT * FROM unnest(%(keys)s::text[], %(tasks)s::text[], %(hashes)s::text[])
        AS n(k, t, h)
    WHERE k <> ''
),
added AS (
    INSERT INTO sheetq_keys (queue, idempotency_key, task_id, payload_hash)
    SELECT %(queue)s, k, t, h FROM wanted
    ON CONFLICT (queue, idempotency_key) DO NOTHING
    RETURNING idempotency_key
)
SELECT w.k FROM wanted AS w
JOIN sheetq_keys AS s ON s.queue = %(queue)s AND s.idempotency_key = w.k AND s.task_id <> w.t
WHERE w.k NOT IN (SELECT idempotency_key FROM added)
LIMIT 1;

-- name: lock_timeout
-- How long this transaction waits for a lock (%(ms)s, e.g. '1500ms'): a command's time limit.
SELECT set_config('lock_timeout', %(ms)s, true);

-- name: enqueue_keyed
-- One task, already canonical and keyed, inside the caller's transaction (`sheetq.enqueue(conn,
-- …)`; migration 0008's sheetq_enqueue_keyed): claim the key or find its holder, write the
-- task and its log row. Returns outcome (enqueued | duplicate | conflict), task_id, status.
SELECT outcome, task_id, status FROM sheetq_enqueue_keyed(
    %(queue)s, %(type)s, %(payload)s, %(hash)s, %(key)s, %(not_before)s, %(owner)s,
    %(task_id)s, %(run_id)s, %(at)s, %(priority)s, %(group)s, %(group_blocks)s);
