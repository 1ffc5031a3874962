"""The tables. Alembic's migrations in ``migrations/versions`` create exactly these (a test compares).

Times are UTC (`UTCDateTime`). Every table that retention trims has an ``id`` key and an indexed
time column, so old rows are deleted in small batches by id.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from gateway.persistence.types import BigId, UTCDateTime

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

def _limits() -> list[Column]:  # type: ignore[type-arg]
    """What keys and teams share beyond rpm, tpm and budget (gateway.limits.settings.KeyLimits)."""
    return [
        Column("max_parallel", Integer),
        Column("budget_period", String(16)),  # daily | weekly | monthly | total; NULL: monthly
        Column("allowed_models", JSON),  # a list of fnmatch patterns; NULL: every model
        Column("expires_at", UTCDateTime),
        Column("metadata", JSON),
        Column("allowed_regions", JSON),  # region names or fnmatch patterns; NULL: every region
        Column("data_collection", String(8)),  # allow | deny; NULL: allow
    ]


teams = Table(
    "teams",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("rpm_limit", Integer),
    Column("tpm_limit", Integer),
    Column("budget_usd", Double),
    *_limits(),
    Column("created_at", UTCDateTime, nullable=False),
)

gateway_keys = Table(
    "gateway_keys",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("digest", String(64), nullable=False, unique=True),  # sha256 hex of the key
    Column("prefix", String(16), nullable=False),  # the key's first characters, to recognise it
    Column("owner", String(256)),
    Column("rpm_limit", Integer),
    Column("tpm_limit", Integer),
    Column("budget_usd", Double),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime),
    Column("team_id", Integer, ForeignKey("teams.id"), index=True),
    *_limits(),
    Column("rotated_at", UTCDateTime),
)

providers = Table(
    "providers",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("kind", String(64), nullable=False),
    Column("config", JSON, nullable=False),
    Column("config_hash", String(64), nullable=False),
    Column("first_seen", UTCDateTime, nullable=False),
    Column("last_seen", UTCDateTime, nullable=False),
    Column("removed_at", UTCDateTime),
)

deployments = Table(
    "deployments",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("endpoint_id", String(256), nullable=False, unique=True),
    Column("model", String(256), nullable=False),
    Column("provider", String(128), nullable=False),
    Column("config", JSON, nullable=False),
    Column("config_hash", String(64), nullable=False),
    Column("first_seen", UTCDateTime, nullable=False),
    Column("last_seen", UTCDateTime, nullable=False),
    Column("removed_at", UTCDateTime),
)

# Every change to a provider or deployment as configured: added, changed, removed, restored.
config_history = Table(
    "config_history",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False, index=True),
    Column("entity", String(16), nullable=False),  # provider | deployment
    Column("name", String(256), nullable=False),
    Column("change", String(16), nullable=False),
    Column("config", JSON, nullable=False),
    Index(None, "entity", "name", "at"),
)

request_log = Table(
    "request_log",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False, index=True),
    Column("request_id", String(128), nullable=False, index=True),
    Column("key_name", String(128)),
    Column("model", String(256), nullable=False),
    Column("endpoint_id", String(256)),
    Column("op", String(16), nullable=False),
    Column("stream", Boolean, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("status", Integer, nullable=False),
    Column("error", String(64)),
    Column("prompt_tokens", Integer, nullable=False),
    Column("cached_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cost_usd", Double, nullable=False),
    Column("ttft_ms", Double),
    Column("latency_ms", Double, nullable=False),
    Column("overhead_ms", Double, nullable=False),
    # Only when persistence.store_bodies is on.
    Column("request_body", Text),
    Column("response_body", Text),
    # An upstream failure's detail; the client saw only a stable message and the request id.
    Column("error_detail", String(1000)),
    # The API the client spoke (responses, messages, chat, ...); `op` is what was routed. NULL in
    # rows from before migration 0007, whose API was their op's own.
    Column("api", String(16)),
    Index(None, "endpoint_id", "at"),
    Index(None, "key_name", "at"),
)

# The durable copy of stored Responses API responses (`responses.durable`), written behind the
# state store's; `key` is the state store's key (owner digest and response id), `body` its JSON.
stored_responses = Table(
    "stored_responses",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("key", String(200), nullable=False, unique=True),
    Column("body", LargeBinary, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False, index=True),
)

spend_daily = Table(
    "spend_daily",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("key_name", String(128), nullable=False),  # "" under open access
    Column("day", Date, nullable=False, index=True),
    Column("requests", BigInteger, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("cached_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("cost_usd", Double, nullable=False),
    UniqueConstraint("key_name", "day"),
)

probe_runs = Table(
    "probe_runs",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("endpoint_id", String(256), nullable=False),
    Column("suite", String(64), nullable=False),
    Column("trigger", String(32), nullable=False),  # schedule | manual | ...
    Column("started_at", UTCDateTime, nullable=False, index=True),
    Column("finished_at", UTCDateTime),
    Column("verdict", String(32)),  # pass | fail | inconclusive | error; None while running
    Column("tokens_spent", BigInteger, nullable=False),
    Column("cost_usd", Double, nullable=False),
    Column("details", JSON),
    Index(None, "endpoint_id", "started_at"),
)

probe_results = Table(
    "probe_results",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", BigInteger, ForeignKey("probe_runs.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("at", UTCDateTime, nullable=False, index=True),
    Column("probe", String(64), nullable=False),
    Column("statistic", Double),
    Column("p_value", Double),
    Column("e_value", Double),
    Column("samples", Integer, nullable=False),
    Column("reference_samples", Integer),
    Column("tokens_spent", BigInteger, nullable=False),
    Column("verdict", String(32), nullable=False),
    Column("details", JSON),
)

health_transitions = Table(
    "health_transitions",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False, index=True),
    Column("endpoint_id", String(256), nullable=False),
    Column("from_state", String(16), nullable=False),
    Column("to_state", String(16), nullable=False),
    Column("source", String(32), nullable=False),  # probe | manual | ...
    Column("reason", Text, nullable=False),
    Column("evidence", JSON),
    Index(None, "endpoint_id", "at"),
)

# The current state of each endpoint that ever left "healthy": what every replica loads.
endpoint_states = Table(
    "endpoint_states",
    metadata,
    Column("endpoint_id", String(256), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("manual", Boolean, nullable=False),
    Column("score", Double),
    Column("source", String(32), nullable=False),
    Column("reason", Text, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # Epoch seconds of the operator's last action on it (0: none): `health_states.order_key`.
    Column("operator_at", Double, nullable=False, server_default="0"),
)

# Frozen probe baselines per (endpoint, probe, key): golden windows, reference self-runs.
probe_baselines = Table(
    "probe_baselines",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("endpoint_id", String(256), nullable=False),
    Column("probe", String(64), nullable=False),
    Column("key", String(256), nullable=False),
    Column("data", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    UniqueConstraint("endpoint_id", "probe", "key"),
)

manual_actions = Table(
    "manual_actions",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False, index=True),
    Column("actor", String(128), nullable=False),
    Column("action", String(32), nullable=False),  # demote | restore
    Column("endpoint_id", String(256), nullable=False),
    Column("reason", Text, nullable=False),
)
