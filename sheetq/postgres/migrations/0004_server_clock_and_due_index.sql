-- server clock and due-work index
-- docs/design.md §11 "Time is the database's": every time sheetq writes or compares on
-- PostgreSQL is the server's, through sheetq_now(): now() plus the session's offset
-- `sheetq.offset` (an interval; empty: none). Only a test clock (SHEETQ_NOW) sets it.
CREATE FUNCTION sheetq_now() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT now() + coalesce(nullif(current_setting('sheetq.offset', true), ''), '0')::interval
$$;

-- docs/design.md §11 "Claims cost the same however much waits": waiting work in the order a
-- claim takes it, longest due first (due since the later of created_at and next_retry_at,
-- sheetq.policy.due_since). A claim reads this index up to now and stops: tasks delayed or
-- backing off sit after now and are never read.
CREATE INDEX sheetq_tasks_due ON sheetq_tasks
    (queue, (greatest(created_at, next_retry_at)), task_id)
    WHERE status IN ('pending', 'retry');
DROP INDEX sheetq_tasks_waiting;
