ALTER TABLE runs RESET (fillfactor);
