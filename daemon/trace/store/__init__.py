"""The flight recorder's SQLite database: schema and migrations (schema), the writer's inserts
and pruning (write), and reads (read); their names are this package's too.

Standard library only (sqlite3, json, tarfile, zlib): the `fingertip trace` CLI reads through
this package without loading the daemon. WAL mode, so readers (the HTTP API, the CLI) never block
the one writer (recorder.Recorder's thread) and a SIGKILL mid-write loses at most the
transaction in flight; synchronous=FULL, so a power cut loses at most that too (write.py), and a
file that fails its check at open is set aside for reading and a new one started. The schema's
version is SQLite's user_version; MIGRATIONS[n] brings version n to n+1.

Bounded by design, whatever the file holds (docs/flight-recorder.md):
- The size cap is split in two shares. The trail (`trusted` rows: calls that ran for a caller
  that passed its connection's token rule) and the rest (calls refused before they ran, and
  calls of callers without the token their connection needs) are pruned each within its own
  share, so a stranger's calls can never evict the trail. Pruned pages go back to the file
  system (incremental_vacuum stepped to completion).
- Reads come in pages of at most PAGE_BYTES with a `next` cursor, and the export is a stream:
  no read holds more than a page, or one record and its images.
"""

from __future__ import annotations

from daemon.trace.store.read import (
    FILTERS,
    HIDDEN,
    OUTCOMES,
    PAGE_BYTES,
    Filter,
    Page,
    decode_cursor,
    encode_cursor,
    export,
    get,
    ids,
    images,
    one,
    open_reader,
    page,
    parse_filter,
    parse_time,
    record_json,
    select,
)
from daemon.trace.store.schema import (
    COLUMNS,
    DB_NAME,
    FLAGS,
    JSON_COLUMNS,
    MIGRATIONS,
    RECORDED,
    ROW_OVERHEAD,
    SCHEMA_VERSION,
    Image,
)
from daemon.trace.store.write import (
    COMPANIONS,
    PRUNE_TO,
    SYNCHRONOUS,
    UNTRUSTED_SHARE,
    Damaged,
    Ledger,
    Row,
    add_images,
    caps,
    check,
    file_bytes,
    give_back,
    image_bytes,
    insert,
    open_writer,
    prune,
    set_aside,
    used_bytes,
)

__all__ = [
    "COLUMNS",
    "COMPANIONS",
    "DB_NAME",
    "FILTERS",
    "FLAGS",
    "HIDDEN",
    "JSON_COLUMNS",
    "MIGRATIONS",
    "OUTCOMES",
    "PAGE_BYTES",
    "PRUNE_TO",
    "RECORDED",
    "ROW_OVERHEAD",
    "SCHEMA_VERSION",
    "SYNCHRONOUS",
    "UNTRUSTED_SHARE",
    "Damaged",
    "Filter",
    "Image",
    "Ledger",
    "Page",
    "Row",
    "add_images",
    "caps",
    "check",
    "decode_cursor",
    "encode_cursor",
    "export",
    "file_bytes",
    "get",
    "give_back",
    "ids",
    "image_bytes",
    "images",
    "insert",
    "one",
    "open_reader",
    "open_writer",
    "page",
    "parse_filter",
    "parse_time",
    "prune",
    "record_json",
    "select",
    "set_aside",
    "used_bytes",
]
