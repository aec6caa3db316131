"""The flight recorder: every invocation kept in SQLite (store), fed by the catalog's observer
hook (recorder), read over HTTP and the CLI (query), and replayed through the catalog (replay)."""
