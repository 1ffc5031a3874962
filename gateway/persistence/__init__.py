"""Persistence: everything an operator needs later, kept off the request path.

models.py      the tables (SQLAlchemy Core), shared by the code and the Alembic migrations
types.py       portable column types and SQL constructs (UTC timestamps, epoch buckets)
engine.py      engine set-up (SQLite WAL pragmas, psycopg 3) and a thread pool for DB calls
migrate.py     Alembic, run programmatically: upgrade, downgrade, and the start-up schema check
records.py     RequestRecord <-> rows and spill-file lines
spill.py       the append-only spill file, rotated for replay
writer.py      the bounded queue sink and the background batch writer
requests.py    request log inserts and the per-key, per-day spend upsert
keys.py        gateway keys (sha256 digests; the raw key is shown once)
catalog.py     providers and deployments synced from config, with history
health.py      health transitions, manual actions, current endpoint states
probes.py      probe runs and per-probe results
stats.py       the admin API's read queries (windows, percentiles, time series, spend)
retention.py   per-table retention, deleted in small batches
refresher.py   the periodic pull of keys and endpoint states into memory
runtime.py     `Persistence`: builds the above for the app's lifespan
"""
