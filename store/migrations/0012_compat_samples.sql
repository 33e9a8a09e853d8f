-- latmesh schema, version 14: compatibility checks from repeated samples (docs/metrics.md,
-- "Compatibility checks"): how many samples of each check ended in each verdict; a check
-- whose samples disagree has the verdict `unstable` (the `verdict` column is a String: no
-- change). Same rules as 0001_init.sql; an ADD COLUMN whose column exists is skipped by the
-- migrator. Rows written before version 14 read back as one sample of their verdict.

ALTER TABLE {db}.{table:compat_results} {on_cluster} ADD COLUMN samples_pass UInt32 DEFAULT 0;
ALTER TABLE {db}.{table:compat_results} {on_cluster} ADD COLUMN samples_fail UInt32 DEFAULT 0;
ALTER TABLE {db}.{table:compat_results} {on_cluster} ADD COLUMN samples_not_offered UInt32 DEFAULT 0;
ALTER TABLE {db}.{table:compat_results} {on_cluster} ADD COLUMN samples_inconclusive UInt32 DEFAULT 0;
