-- a task's sheet cells
-- docs/design.md §12: one task as the mirror writes it, the §2 cell texts in the order of
-- the Queue's columns (QUEUE_COLUMNS). Times as `2026-01-05T09:00:00Z` (empty when NULL),
-- everything else as text. Used as `CROSS JOIN LATERAL sheetq_task_cells(t)` by the
-- mirror's window read and its locked read of the tasks a manager edited.
CREATE FUNCTION sheetq_task_cells(t sheetq_tasks)
RETURNS TABLE (
    task_id text, created_at text, type text, payload_json text, status text,
    retry_count text, next_retry_at text, last_error text, idempotency_key text,
    updated_at text, error_class text, result text, lease_owner text, lease_until text,
    payload_hash text, alerted_at text, owner text, priority text, "group" text
)
LANGUAGE sql STABLE
AS $$
    SELECT t.task_id::text,
           coalesce(to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
           t.type::text,
           t.payload_json::text,
           t.status::text,
           t.retry_count::text,
           coalesce(to_char(t.next_retry_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
           t.last_error::text,
           t.idempotency_key::text,
           coalesce(to_char(t.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
           t.error_class::text,
           t.result::text,
           t.lease_owner::text,
           coalesce(to_char(t.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
           t.payload_hash::text,
           coalesce(to_char(t.alerted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
           t.owner::text,
           t.priority::text,
           t."group"::text
$$;
