-- A batch's results are read a page at a time by message id
-- (store.BatchResultList: runs of the batch past a message id, by
-- message id). With only runs_batch_id_idx (batch_id, status) each page
-- read and sorted every run of the batch, so exporting a batch took time
-- growing with the square of its size: 1,000,000 rows took 349 s. This
-- index gives each page a range scan.
CREATE INDEX runs_batch_message_idx ON runs (batch_id, message_id, run_no DESC);
