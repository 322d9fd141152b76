-- A run's row is updated several times while it is queued: the relay
-- marks it published, the worker takes its lease (and extends it), then
-- writes its outcome. The lease's columns are in no index, so its update
-- can be HOT (no new index entries: five indexes on runs) when the row's
-- page has room for the new version; with the default fillfactor (100)
-- the pages were full and every lease wrote five index entries. 80 leaves
-- room for a few versions a page (issue 18, docs/benchmarks.md). It holds
-- for pages written from now on; VACUUM FULL or CLUSTER rewrites the rest.
ALTER TABLE runs SET (fillfactor = 80);
