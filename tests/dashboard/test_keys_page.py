"""The Keys & spend page in headless Chromium: database keys and teams with their limits, this
period's spend and what is left of the budget, as the admin API reports them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.dashboard.conftest import ADMIN_KEY, ARTIFACTS, Gateway, sign_in

pytest.importorskip("playwright.sync_api")
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def test_keys_and_teams_with_budgets(page: Any, gateway: Gateway) -> None:
    made = httpx.post(gateway.root + "/admin/api/teams", json={"name": "eng", "budget_usd": 50, "budget_period": "monthly"}, headers=ADMIN, timeout=10)
    assert made.status_code == 201, made.text
    key = httpx.post(
        gateway.root + "/admin/api/keys",
        json={"name": "ci-bot", "team": "eng", "rpm": 60, "budget_usd": 5, "budget_period": "daily"},
        headers=ADMIN,
        timeout=10,
    )
    assert key.status_code == 201, key.text
    sign_in(page, gateway)
    page.get_by_role("link", name="Keys & spend").click()
    page.wait_for_selector("#keys-table tbody tr")
    cells = [c.inner_text() for c in page.locator("#keys-table tbody tr").first.locator("td").all()]
    assert cells[:4] == ["ci-bot", "eng", "active", "60"]
    assert "$5.00 / daily" in cells and "$0.00" in cells
    team = [c.inner_text() for c in page.locator("#teams-table tbody tr").first.locator("td").all()]
    assert team[:2] == ["eng", "1"] and "$50.00 / monthly" in team
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "keys.png"), full_page=True)


def test_spend_over_time_per_key_and_team(page: Any, gateway: Gateway) -> None:
    """Three days of recorded spend of a team's key: the team's totals, its per-day rows, and a
    daily-spend chart per key and per team with a point for each day."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import insert

    from gateway.persistence.models import spend_daily

    team = httpx.post(gateway.root + "/admin/api/teams", json={"name": "ops"}, headers=ADMIN, timeout=10)
    assert team.status_code == 201, team.text
    made = httpx.post(
        gateway.root + "/admin/api/keys", json={"name": "ops-bot", "team": "ops"}, headers=ADMIN, timeout=10
    )
    assert made.status_code == 201, made.text
    today = datetime.now(UTC).date()
    costs = {today - timedelta(days=2): 0.5, today - timedelta(days=1): 1.25, today: 0.25}
    assert gateway.state.persistence is not None
    tokens = {"prompt_tokens": 10, "cached_tokens": 0, "completion_tokens": 5}
    rows = [{"key_name": "ops-bot", "day": d, "requests": 2, **tokens, "cost_usd": c} for d, c in costs.items()]
    with gateway.state.persistence.db.engine.begin() as conn:
        conn.execute(insert(spend_daily), rows)
    sign_in(page, gateway)
    page.get_by_role("link", name="Keys & spend").click()
    page.wait_for_selector("#team-spend tbody tr")
    row = [c.inner_text() for c in page.locator("#team-spend tbody tr").first.locator("td").all()]
    assert row == ["ops", "1", "6", "30", "15", "$2.0000"]
    days = [[c.inner_text() for c in r.locator("td").all()] for r in page.locator("#team-spend-days tbody tr").all()]
    assert days == [[d.isoformat(), "ops", "2", f"${costs[d]:.4f}"] for d in sorted(costs, reverse=True)]
    team_chart = page.locator('#sp-charts figure[data-chart="Daily spend per team"]')
    team_chart.locator("canvas").wait_for()
    assert team_chart.get_attribute("data-points") == "3"
    key_chart = page.locator('#sp-charts figure[data-chart="Daily spend per key"]')
    assert key_chart.locator("canvas").count() == 1 and int(key_chart.get_attribute("data-points") or 0) >= 1
    # No script error (the one 401 is the session check before signing in).
    assert [e for e in page.console_errors if "401" not in e] == []  # type: ignore[attr-defined]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "keys-spend.png"), full_page=True)
