-- name: schema_version
-- The schema version recorded in the database (0: none yet).
SELECT coalesce(max(version), 0) FROM sheetq_migrations;
