package store

// ReadMigrations exposes readMigrations to the tests of package store_test.
var ReadMigrations = readMigrations
