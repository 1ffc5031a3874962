"""Providers and deployments synced from config, with history, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select

from gateway.catalog import endpoints_from_settings
from gateway.config import Settings, load_config
from gateway.persistence.catalog import sync_catalog
from gateway.persistence.models import config_history, deployments, providers


def settings(*deps: dict[str, Any], extra_provider: bool = False, price: float = 1.0) -> Settings:
    provs = [{"name": "p", "base_url": "http://p.test/v1", "headers": {"x-secret": "hunter2"}}]
    if extra_provider:
        provs.append({"name": "q", "base_url": "http://q.test/v1"})
    default = [{"model": "m", "provider": "p", "price": {"input": price}}]
    return load_config(environ={}, providers=provs, deployments=list(deps) or default)


def sync(engine: Engine, s: Settings, now: float) -> Any:
    return sync_catalog(engine, s, endpoints_from_settings(s), now)


def history(engine: Engine) -> list[tuple[str, str, str]]:
    h = config_history.c
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(h.entity, h.name, h.change).order_by(h.id))]


def test_first_sync_adds_everything(engine: Engine) -> None:
    result = sync(engine, settings(), 1000.0)
    assert result["providers"].added == 1 and result["deployments"].added == 1
    with engine.connect() as conn:
        prov = conn.execute(select(providers)).mappings().one()
        dep = conn.execute(select(deployments)).mappings().one()
    assert prov["name"] == "p" and prov["kind"] == "openai"
    assert prov["config"]["header_names"] == ["x-secret"]
    assert "hunter2" not in str(prov["config"])  # header values may be credentials
    assert (dep["endpoint_id"], dep["model"], dep["provider"]) == ("p/m", "m", "p")
    assert dep["config"]["price"]["input"] == 1.0
    assert history(engine) == [("provider", "p", "added"), ("deployment", "p/m", "added")]


def test_unchanged_config_writes_no_history(engine: Engine) -> None:
    sync(engine, settings(), 1000.0)
    result = sync(engine, settings(), 2000.0)
    assert result["deployments"].changed == 0
    assert len(history(engine)) == 2
    with engine.connect() as conn:
        last_seen = conn.execute(select(deployments.c.last_seen)).scalar_one()
    assert last_seen.timestamp() == 2000.0


def test_change_remove_restore(engine: Engine) -> None:
    sync(engine, settings(), 1000.0)
    sync(engine, settings(price=2.0), 2000.0)  # changed
    two = settings({"model": "m2", "provider": "q"}, extra_provider=True)
    sync(engine, two, 3000.0)  # p/m removed, q/m2 added, q added
    sync(engine, settings(), 4000.0)  # p/m restored, q/m2 and q removed
    assert history(engine)[2:] == [
        ("deployment", "p/m", "changed"),
        ("provider", "q", "added"),
        ("deployment", "q/m2", "added"),
        ("deployment", "p/m", "removed"),
        ("provider", "q", "removed"),
        ("deployment", "p/m", "restored"),
        ("deployment", "q/m2", "removed"),
    ]
    with engine.connect() as conn:
        rows = {
            r.endpoint_id: r.removed_at
            for r in conn.execute(select(deployments.c.endpoint_id, deployments.c.removed_at))
        }
    assert rows["p/m"] is None and rows["q/m2"] is not None
