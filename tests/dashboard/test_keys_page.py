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
