-- task priority
-- docs/design.md §14: a task's priority, an integer, higher first (tasks queued before this
-- migration have 0). Claims take due tasks by priority, then due time, then task_id.
ALTER TABLE sheetq_tasks ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE sheetq_archive ADD COLUMN priority integer NOT NULL DEFAULT 0;

-- docs/design.md §11 "Claims cost the same however much waits": the due-work index now in
-- the claim's order within each priority. The claim walks the priorities present (a skip
-- scan, one probe each) and reads each priority's due tasks up to now and stops: tasks
-- delayed or backing off sit after now in their priority and are never read.
DROP INDEX sheetq_tasks_due;
CREATE INDEX sheetq_tasks_due ON sheetq_tasks
    (queue, priority DESC, (greatest(created_at, next_retry_at)), task_id)
    WHERE status IN ('pending', 'retry');
