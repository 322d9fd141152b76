DROP INDEX runs_batch_message_idx;
