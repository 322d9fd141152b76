DROP TABLE results_outbox;
DROP TABLE results_outbox_state;
