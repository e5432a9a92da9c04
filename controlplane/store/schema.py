"""The store's schema on both backends, its version, and the forward migrations between versions.

Version 1 is the schema of every release before versions were recorded (a store with tables but
no ``schema_version`` row in ``meta``). Opening a store brings it up to :data:`SCHEMA_VERSION`
by applying each later migration in order, inside the same write transaction that reads the
version, so two processes opening one store never migrate it twice. A store whose version is
newer than this code knows is refused: an older release must not write a schema it cannot read.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.core.errors import SpotplaneError
from controlplane.store.backend import Tx
from controlplane.store.dialect import Dialect

INDEXES = """
CREATE INDEX IF NOT EXISTS jobs_tenant_state ON jobs (tenant_id, state);
CREATE INDEX IF NOT EXISTS jobs_tenant ON jobs (tenant_id, seq);
CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs (state, kind, submitted_at);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE INDEX IF NOT EXISTS jobs_bag ON jobs (bag_id);
CREATE INDEX IF NOT EXISTS jobs_bag_state ON jobs (bag_id, state);
CREATE INDEX IF NOT EXISTS jobs_cancel ON jobs (cancel_requested) WHERE cancel_requested = 1;
CREATE INDEX IF NOT EXISTS nodes_state ON nodes (state);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id);
CREATE INDEX IF NOT EXISTS decisions_job ON decisions (job_id);
CREATE INDEX IF NOT EXISTS intents_status ON intents (status);
CREATE INDEX IF NOT EXISTS capacity_history_at ON capacity_history (at);
CREATE INDEX IF NOT EXISTS idempotency_created ON idempotency (created_at);
"""  # the same on both backends, after their tables

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (
  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, token_hash TEXT NOT NULL UNIQUE,
  max_gpus INTEGER NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS demand (
  tenant_id TEXT NOT NULL, hour INTEGER NOT NULL, hp_gpu_hours REAL NOT NULL DEFAULT 0,
  spot_gpu_hours REAL NOT NULL DEFAULT 0, PRIMARY KEY (tenant_id, hour));
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, tenant_id TEXT NOT NULL,
  kind TEXT NOT NULL, state TEXT NOT NULL, bag_id TEXT, submitted_at REAL NOT NULL,
  cost REAL NOT NULL DEFAULT 0, on_demand_cost REAL NOT NULL DEFAULT 0,
  gpu_hours REAL NOT NULL DEFAULT 0,
  cancel_requested INTEGER NOT NULL DEFAULT 0, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS bags (
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, created_at REAL NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
  id TEXT PRIMARY KEY, state TEXT NOT NULL, job_id TEXT, intent_id TEXT NOT NULL,
  body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, tenant_id TEXT, job_id TEXT,
  node_id TEXT, kind TEXT NOT NULL, src TEXT, dst TEXT, cause TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (
  id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, job_id TEXT NOT NULL, tenant_id TEXT,
  policy TEXT NOT NULL, action TEXT NOT NULL, zone TEXT, reason TEXT NOT NULL,
  observation TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS intents (
  id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, created_at REAL NOT NULL,
  done_at REAL, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS zones (
  zone TEXT NOT NULL, instance_type TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (zone, instance_type));
CREATE TABLE IF NOT EXISTS quotas (
  pool TEXT NOT NULL, accelerator TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (pool, accelerator));
CREATE TABLE IF NOT EXISTS capacity_history (
  id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, accelerator TEXT NOT NULL,
  body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS forecasts (tenant_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS policy_state (job_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency (
  tenant_id TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, status INTEGER NOT NULL,
  response TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (tenant_id, key));
CREATE TABLE IF NOT EXISTS quarantine (
  tbl TEXT NOT NULL, id TEXT NOT NULL, at REAL NOT NULL, reason TEXT NOT NULL, body TEXT,
  PRIMARY KEY (tbl, id));
""" + INDEXES + """
CREATE TABLE IF NOT EXISTS job_totals (
  state TEXT NOT NULL, kind TEXT NOT NULL, n INTEGER NOT NULL DEFAULT 0,
  cost REAL NOT NULL DEFAULT 0, on_demand_cost REAL NOT NULL DEFAULT 0, PRIMARY KEY (state, kind));
CREATE TRIGGER IF NOT EXISTS job_totals_insert AFTER INSERT ON jobs BEGIN
  INSERT INTO job_totals (state, kind, n, cost, on_demand_cost)
    VALUES (new.state, new.kind, 1, new.cost, new.on_demand_cost)
    ON CONFLICT (state, kind) DO UPDATE SET n = n + 1, cost = cost + excluded.cost,
      on_demand_cost = on_demand_cost + excluded.on_demand_cost;
END;
CREATE TRIGGER IF NOT EXISTS job_totals_update AFTER UPDATE OF state, kind, cost, on_demand_cost ON jobs
BEGIN
  UPDATE job_totals SET n = n - 1, cost = cost - old.cost, on_demand_cost = on_demand_cost - old.on_demand_cost
    WHERE state = old.state AND kind = old.kind;
  INSERT INTO job_totals (state, kind, n, cost, on_demand_cost)
    VALUES (new.state, new.kind, 1, new.cost, new.on_demand_cost)
    ON CONFLICT (state, kind) DO UPDATE SET n = n + 1, cost = cost + excluded.cost,
      on_demand_cost = on_demand_cost + excluded.on_demand_cost;
END;
CREATE TRIGGER IF NOT EXISTS job_totals_delete AFTER DELETE ON jobs BEGIN
  UPDATE job_totals SET n = n - 1, cost = cost - old.cost, on_demand_cost = on_demand_cost - old.on_demand_cost
    WHERE state = old.state AND kind = old.kind;
END;
"""
# job_totals: jobs and their bills per (state, kind), kept by the triggers above in the same
# transaction as every job write, so /metrics reads a handful of rows however long the backlog.
# A store written before the table existed is counted once when it is opened.
JOB_TOTALS_BACKFILL = """
INSERT INTO job_totals (state, kind, n, cost, on_demand_cost)
  SELECT state, kind, COUNT(*), SUM(cost), SUM(on_demand_cost) FROM jobs GROUP BY state, kind
"""


# The same tables in PostgreSQL's types: DOUBLE PRECISION for REAL (PostgreSQL's REAL is 4
# bytes), identity columns for AUTOINCREMENT, an explicit ``rowid`` (insertion order) on nodes,
# and job_totals kept by statement-level triggers over transition tables: one upsert per
# (state, kind) a statement touches. Row-level triggers would update one totals row once per
# job, and PostgreSQL walks the row's whole chain of versions at each update inside one
# transaction: a statement over a million jobs would take minutes.
PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (
  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, token_hash TEXT NOT NULL UNIQUE,
  max_gpus BIGINT NOT NULL, created_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS demand (
  tenant_id TEXT NOT NULL, hour BIGINT NOT NULL, hp_gpu_hours DOUBLE PRECISION NOT NULL DEFAULT 0,
  spot_gpu_hours DOUBLE PRECISION NOT NULL DEFAULT 0, PRIMARY KEY (tenant_id, hour));
CREATE TABLE IF NOT EXISTS jobs (
  seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, id TEXT NOT NULL UNIQUE,
  tenant_id TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL, bag_id TEXT,
  submitted_at DOUBLE PRECISION NOT NULL, cost DOUBLE PRECISION NOT NULL DEFAULT 0,
  on_demand_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
  gpu_hours DOUBLE PRECISION NOT NULL DEFAULT 0,
  cancel_requested INTEGER NOT NULL DEFAULT 0, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS bags (
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
  body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
  id TEXT PRIMARY KEY, state TEXT NOT NULL, job_id TEXT, intent_id TEXT NOT NULL,
  body TEXT NOT NULL, rowid BIGINT GENERATED ALWAYS AS IDENTITY);
CREATE TABLE IF NOT EXISTS events (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, at DOUBLE PRECISION NOT NULL,
  tenant_id TEXT, job_id TEXT, node_id TEXT, kind TEXT NOT NULL, src TEXT, dst TEXT,
  cause TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, at DOUBLE PRECISION NOT NULL,
  job_id TEXT NOT NULL, tenant_id TEXT, policy TEXT NOT NULL, action TEXT NOT NULL, zone TEXT,
  reason TEXT NOT NULL, observation TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS intents (
  id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL, done_at DOUBLE PRECISION, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS zones (
  zone TEXT NOT NULL, instance_type TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (zone, instance_type));
CREATE TABLE IF NOT EXISTS quotas (
  pool TEXT NOT NULL, accelerator TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (pool, accelerator));
CREATE TABLE IF NOT EXISTS capacity_history (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, at DOUBLE PRECISION NOT NULL,
  accelerator TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS forecasts (tenant_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS policy_state (job_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency (
  tenant_id TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, status INTEGER NOT NULL,
  response TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant_id, key));
CREATE TABLE IF NOT EXISTS quarantine (
  tbl TEXT NOT NULL, id TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, reason TEXT NOT NULL,
  body TEXT, PRIMARY KEY (tbl, id));
""" + INDEXES + """
CREATE TABLE IF NOT EXISTS job_totals (
  state TEXT NOT NULL, kind TEXT NOT NULL, n BIGINT NOT NULL DEFAULT 0,
  cost DOUBLE PRECISION NOT NULL DEFAULT 0, on_demand_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
  PRIMARY KEY (state, kind));
CREATE OR REPLACE FUNCTION job_totals_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    INSERT INTO job_totals AS t (state, kind, n, cost, on_demand_cost)
      SELECT state, kind, -COUNT(*), -SUM(cost), -SUM(on_demand_cost) FROM old_rows
      GROUP BY state, kind
      ON CONFLICT (state, kind) DO UPDATE SET n = t.n + excluded.n,
        cost = t.cost + excluded.cost, on_demand_cost = t.on_demand_cost + excluded.on_demand_cost;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO job_totals AS t (state, kind, n, cost, on_demand_cost)
      SELECT state, kind, COUNT(*), SUM(cost), SUM(on_demand_cost) FROM new_rows
      GROUP BY state, kind
      ON CONFLICT (state, kind) DO UPDATE SET n = t.n + excluded.n,
        cost = t.cost + excluded.cost, on_demand_cost = t.on_demand_cost + excluded.on_demand_cost;
  END IF;
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER job_totals_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION job_totals_apply();
CREATE OR REPLACE TRIGGER job_totals_update AFTER UPDATE ON jobs
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION job_totals_apply();
CREATE OR REPLACE TRIGGER job_totals_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION job_totals_apply();
"""

BASELINE = 1  # the schema above, as every release before versioned schemas wrote it


@dataclass(frozen=True)
class Migration:
    """One forward step: from ``version - 1`` to ``version``, the same on both backends
    unless ``postgres`` says otherwise."""

    version: int
    why: str
    sql: str
    postgres: str | None = None

    def script(self, dialect: Dialect) -> str:
        return self.postgres if dialect.name == "postgresql" and self.postgres else self.sql


MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, "the newest events of a kind into a state (recent preemptions) without a scan",
              "CREATE INDEX IF NOT EXISTS events_kind_dst ON events (kind, dst, id)"),
    Migration(3, "packages and archived logs in the store, and one request-rate bucket per "
                 "tenant that every API replica shares",
              """
CREATE TABLE IF NOT EXISTS blobs (
  ns TEXT NOT NULL, key TEXT NOT NULL, size INTEGER NOT NULL, data BLOB NOT NULL,
  at REAL NOT NULL, PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS rate_buckets (
  key TEXT PRIMARY KEY, tokens REAL NOT NULL, at REAL NOT NULL, ok INTEGER NOT NULL);
""", postgres="""
CREATE TABLE IF NOT EXISTS blobs (
  ns TEXT NOT NULL, key TEXT NOT NULL, size BIGINT NOT NULL, data BYTEA NOT NULL,
  at DOUBLE PRECISION NOT NULL, PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS rate_buckets (
  key TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, at DOUBLE PRECISION NOT NULL,
  ok INTEGER NOT NULL);
"""),
    Migration(4, "the registry of workload Ray clusters that run tenants' jobs",
              """
CREATE TABLE IF NOT EXISTS workload_clusters (
  name TEXT PRIMARY KEY, state TEXT NOT NULL, registered_at REAL NOT NULL, body TEXT NOT NULL);
""", postgres="""
CREATE TABLE IF NOT EXISTS workload_clusters (
  name TEXT PRIMARY KEY, state TEXT NOT NULL, registered_at DOUBLE PRECISION NOT NULL,
  body TEXT NOT NULL);
"""),
    Migration(5, "tenants' spend limits (an hourly cap and a monthly budget), one row each",
              """
CREATE TABLE IF NOT EXISTS tenant_budgets (
  tenant_id TEXT PRIMARY KEY, body TEXT NOT NULL, updated_at REAL NOT NULL);
""", postgres="""
CREATE TABLE IF NOT EXISTS tenant_budgets (
  tenant_id TEXT PRIMARY KEY, body TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL);
"""),
    Migration(6, "each tenant's fair-share weight and nominal GPUs per pool, apart from its row",
              "CREATE TABLE IF NOT EXISTS tenant_shares (tenant_id TEXT PRIMARY KEY, "
              "body TEXT NOT NULL)"),
    Migration(7, "a node's report finds its node by instance id through an index, not a scan "
                 "of the live nodes (the column is kept by every node write, backfilled here)",
              """
ALTER TABLE nodes ADD COLUMN instance_id TEXT;
UPDATE nodes SET instance_id = json_extract(body, '$.instance_id');
CREATE INDEX IF NOT EXISTS nodes_instance ON nodes (instance_id);
""", postgres="""
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS instance_id TEXT;
UPDATE nodes SET instance_id = body::jsonb ->> 'instance_id';
CREATE INDEX IF NOT EXISTS nodes_instance ON nodes (instance_id);
"""),
)
SCHEMA_VERSION = MIGRATIONS[-1].version if MIGRATIONS else BASELINE


class SchemaTooNew(SpotplaneError):
    """The store was written by a newer release than this one."""

    def __init__(self, where: str, found: int, known: int) -> None:
        self.found, self.known = found, known
        super().__init__(
            f"the store at {where} has schema version {found}, newer than version {known} that "
            "this spotplane knows", fix=f"run a spotplane release that knows schema version "
            f"{found} or later (a store is never downgraded), or point --db at another store")


def stored_version(tx: Tx, dialect: Dialect) -> int | None:
    """The store's schema version: None for an empty database, 1 for an unversioned store."""
    if not has_table(tx, dialect, "meta"):
        return None
    row = tx.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return BASELINE if row is None else int(row[0])


def has_table(tx: Tx, dialect: Dialect, name: str) -> bool:
    if dialect.name == "postgresql":
        return tx.execute("SELECT to_regclass(?)", (name,)).fetchone()[0] is not None
    return tx.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                      (name,)).fetchone() is not None


def ensure_schema(tx: Tx, dialect: Dialect, where: str) -> int:
    """Create or upgrade the schema inside ``tx``; returns the version the store had (0: new).

    Raises :class:`SchemaTooNew` for a store from a newer release, before anything is written."""
    found = stored_version(tx, dialect)
    if found is not None and found > SCHEMA_VERSION:
        raise SchemaTooNew(where, found, SCHEMA_VERSION)
    fresh_totals = not has_table(tx, dialect, "job_totals")
    if dialect.name != "postgresql":
        tx.script(SCHEMA)  # every table IF NOT EXISTS: a no-op on a complete store
    elif found != SCHEMA_VERSION or fresh_totals:  # PostgreSQL replaces its trigger: only when due
        tx.script(PG_SCHEMA)
    if fresh_totals:
        tx.execute(JOB_TOTALS_BACKFILL)
    for step in MIGRATIONS:
        if step.version > (found or BASELINE) or found is None:
            tx.script(step.script(dialect))
    if found != SCHEMA_VERSION:
        tx.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) "
                   "DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION),))
    return found or 0
