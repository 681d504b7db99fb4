-- task groups
-- docs/design.md §14: tasks of one group (the `group` column) run one at a time, in enqueue
-- order (created_at, task_id). A task holds its group while pending, processing or retry,
-- and while failed if its type said `group_blocks_on_failure` when it was enqueued
-- (`group_blocks`); the earliest holding task is the group's head (sheetq.order).
--
-- `held` marks a waiting task that may not be claimed: every waiting task of a group but
-- its head, and the head too while another task of the group is processing (a requeued
-- earlier task waits for a later one that runs). The due-work index leaves held tasks out,
-- so a claim never reads them, however many wait behind their groups (docs/design.md §11
-- "Claims cost the same however much waits"); the claim itself is unchanged but for
-- `NOT held`. A trigger keeps `held` right whatever statement changes a status (enqueue,
-- claim's duplicate skips, settle, recovery, expiry, requeue, skip, archive, a mirrored
-- edit, migrate): at most one waiting task per group is ever not held.
ALTER TABLE sheetq_tasks ADD COLUMN "group" text NOT NULL DEFAULT '';
ALTER TABLE sheetq_tasks ADD COLUMN group_blocks boolean NOT NULL DEFAULT false;
ALTER TABLE sheetq_tasks ADD COLUMN held boolean NOT NULL DEFAULT false;
ALTER TABLE sheetq_archive ADD COLUMN "group" text NOT NULL DEFAULT '';

DROP INDEX sheetq_tasks_due;
CREATE INDEX sheetq_tasks_due ON sheetq_tasks
    (queue, priority DESC, (greatest(created_at, next_retry_at)), task_id)
    WHERE status IN ('pending', 'retry') AND NOT held;
-- a group's holding tasks in enqueue order: its head is the first
CREATE INDEX sheetq_tasks_group_head ON sheetq_tasks (queue, "group", created_at, task_id)
    WHERE "group" <> ''
      AND (status IN ('pending', 'processing', 'retry') OR (status = 'failed' AND group_blocks));
-- a group's running task, and its waiting task that may be claimed (at most one each)
CREATE INDEX sheetq_tasks_group_busy ON sheetq_tasks (queue, "group")
    WHERE "group" <> '' AND status = 'processing';
CREATE INDEX sheetq_tasks_group_free ON sheetq_tasks (queue, "group")
    WHERE "group" <> '' AND status IN ('pending', 'retry') AND NOT held;

-- Set `held` right for group `g` of queue `q`, under the group's lock (a transaction-level
-- advisory lock: two statements never decide one group at once). The group's free task is
-- locked first, so a claim of it in flight commits before the decision is read.
CREATE FUNCTION sheetq_group_refresh(q text, g text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    head_id text;
    head_status text;
    busy boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('sheetq-group:' || q || ':' || g, 0));
    PERFORM 1 FROM sheetq_tasks
    WHERE queue = q AND "group" = g AND status IN ('pending', 'retry') AND NOT held
    FOR UPDATE;
    SELECT task_id, status INTO head_id, head_status FROM sheetq_tasks
    WHERE queue = q AND "group" = g
      AND (status IN ('pending', 'processing', 'retry') OR (status = 'failed' AND group_blocks))
    ORDER BY created_at, task_id
    LIMIT 1;
    busy := EXISTS (SELECT 1 FROM sheetq_tasks
                    WHERE queue = q AND "group" = g AND status = 'processing');
    UPDATE sheetq_tasks SET held = true
    WHERE queue = q AND "group" = g AND status IN ('pending', 'retry') AND NOT held
      AND (busy OR task_id IS DISTINCT FROM head_id);
    IF head_status IN ('pending', 'retry') AND NOT busy THEN
        UPDATE sheetq_tasks SET held = false WHERE queue = q AND task_id = head_id AND held;
    END IF;
END $$;

-- After a statement that adds, removes or changes the status of grouped tasks: refresh each
-- group it touched, in one order (no two statements wait for each other's groups). A claim
-- (waiting → processing) changes no group's head and is left out: the hot path stays as is.
CREATE FUNCTION sheetq_groups_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP = 'INSERT' THEN
        FOR r IN SELECT DISTINCT queue, "group" FROM changed WHERE "group" <> '' ORDER BY 1, 2
        LOOP
            PERFORM sheetq_group_refresh(r.queue, r."group");
        END LOOP;
    ELSIF TG_OP = 'DELETE' THEN
        FOR r IN SELECT DISTINCT queue, "group" FROM gone WHERE "group" <> '' ORDER BY 1, 2
        LOOP
            PERFORM sheetq_group_refresh(r.queue, r."group");
        END LOOP;
    ELSE
        FOR r IN
            SELECT DISTINCT x.queue, x."group" FROM (
                SELECT n.queue, n."group", o."group" AS old_group
                FROM changed AS n JOIN gone AS o ON o.queue = n.queue AND o.task_id = n.task_id
                WHERE (n."group" <> '' OR o."group" <> '')
                  AND (n.status IS DISTINCT FROM o.status OR n."group" <> o."group"
                       OR n.group_blocks <> o.group_blocks)
                  AND NOT (o.status IN ('pending', 'retry') AND n.status = 'processing'
                           AND n."group" = o."group")
            ) AS c, LATERAL (VALUES (c.queue, c."group"), (c.queue, c.old_group)) AS x(queue, "group")
            WHERE x."group" <> ''
            ORDER BY 1, 2
        LOOP
            PERFORM sheetq_group_refresh(r.queue, r."group");
        END LOOP;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER sheetq_tasks_groups_inserted AFTER INSERT ON sheetq_tasks
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION sheetq_groups_changed();
CREATE TRIGGER sheetq_tasks_groups_updated AFTER UPDATE ON sheetq_tasks
    REFERENCING OLD TABLE AS gone NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION sheetq_groups_changed();
CREATE TRIGGER sheetq_tasks_groups_deleted AFTER DELETE ON sheetq_tasks
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION sheetq_groups_changed();
