"""The dashboard in headless Chromium against a live gateway with seeded data: sign in, states on the
overview, a demotion's reason, charts with data points, restore through the button, sign-out, and a
provider name with markup rendered as text. Screenshots go to artifacts/dashboard/."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.dashboard.conftest import (
    ADMIN_KEY,
    ARTIFACTS,
    DEMOTE_REASON,
    EVIL,
    EVIL_MODEL,
    SUSPECT_REASON,
    Gateway,
    sign_in,
)

expect = pytest.importorskip("playwright.sync_api").expect


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def row(page: Any, endpoint_id: str) -> Any:
    return page.locator(f'#overview-table tbody tr[data-endpoint="{endpoint_id}"]')


def test_sign_in_lists_every_endpoint_with_its_state(
    page: Any, gateway: Gateway
) -> None:
    sign_in(page, gateway)
    api_states = {
        h["endpoint"]: h["state"] for h in gateway.api("/admin/api/health")["data"]
    }
    assert api_states == {
        "p/m": "healthy",
        "q/broken": "demoted",
        "r/m2": "suspect",
        "evil/xss": "probation",
    }
    page.wait_for_selector("#overview-table td.num")
    for endpoint_id, state in api_states.items():
        badge = row(page, endpoint_id).locator(".badge")
        assert badge.get_attribute("data-state") == state
        assert state in badge.inner_text()
    assert "demoted (manual)" in row(page, "q/broken").inner_text()
    assert (
        DEMOTE_REASON in row(page, "q/broken").inner_text()
    )  # a demoted endpoint shows why
    assert row(page, "q/broken").locator("td").all_inner_texts()[5:7] == ["3", "100.0%"]
    assert SUSPECT_REASON in row(page, "r/m2").inner_text()
    cells = row(page, "p/m").locator("td").all_inner_texts()
    assert cells[0] == "p" and cells[2] == "eu-west"
    assert (
        cells[5] != "\u2014" and int(cells[5].replace(",", "")) > 0
    )  # requests in the last hour
    assert cells[7].endswith(" ms") and cells[12] in {
        "fail",
        "pass",
    }  # p50 and the last probe verdict
    assert (
        row(page, "r/m2").locator("td").all_inner_texts()[12] == "\u2014"
    )  # no probe data yet
    # The admin key is nowhere in the page or its storage.
    assert ADMIN_KEY not in page.content()
    assert page.evaluate("document.cookie") == ""  # the session cookie is HttpOnly
    shot(page, "overview.png")


def test_overview_sorts_and_filters(page: Any, gateway: Gateway) -> None:
    sign_in(page, gateway)
    page.get_by_label("State").select_option("suspect")
    assert page.locator("#overview-table tbody tr").count() == 1
    page.get_by_label("State").select_option("")
    page.get_by_label("Filter").fill("eu-west")
    assert (
        page.locator("#overview-table tbody tr").all_inner_texts()[0].startswith("p\t")
    )
    page.get_by_label("Filter").fill("nothing-matches")
    assert page.locator("#overview-empty").is_visible()
    page.get_by_label("Filter").fill("")
    page.get_by_role("button", name="Region").click()
    regions = [
        r.split("\t")[2]
        for r in page.locator("#overview-table tbody tr").all_inner_texts()
    ]
    assert regions == sorted(regions)


def test_markup_in_names_renders_as_text(page: Any, gateway: Gateway) -> None:
    sign_in(page, gateway)
    cells = row(page, "evil/xss").locator("td")
    assert cells.nth(0).inner_text() == EVIL
    assert cells.nth(1).inner_text() == EVIL_MODEL
    assert page.locator("#overview-table script, #overview-table img").count() == 0
    page.goto(gateway.root + "/admin#/endpoint/" + "evil%2Fxss")
    page.wait_for_selector("#ep-title:has-text('alert(1)')")
    assert page.locator("#ep-title").inner_text() == f"{EVIL} / {EVIL_MODEL}"
    assert "<i>watching</i>" in page.locator("#ep-timeline").inner_text()
    page.wait_for_timeout(300)
    assert page.dialogs == []  # no alert fired
    assert [e for e in page.console_errors if "Content Security Policy" in e] == []


def test_endpoint_page_draws_charts_and_history(page: Any, gateway: Gateway) -> None:
    sign_in(page, gateway)
    row(page, "p/m").get_by_role("link").click()
    page.wait_for_selector('figure[data-chart="Latency"] canvas')
    points = {
        f.get_attribute("data-chart"): int(f.get_attribute("data-points") or 0)
        for f in page.locator("figure.chart").all()
    }
    assert (
        points["Latency"] > 20
        and points["Throughput"] > 20
        and points["Cached-token share"] > 20
    )
    assert points["Probe: ks_output_length"] == 4
    assert (
        page.locator('figure[data-chart="Probe: ks_output_length"] .u-legend')
        .inner_text()
        .count("threshold")
        == 1
    )
    # the canvas holds drawn pixels, not a blank surface
    drawn = page.evaluate(
        """() => { const c = document.querySelector('figure[data-chart="Latency"] canvas');
                   const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                   let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; }"""
    )
    assert drawn > 500
    assert page.locator("#ep-runs tbody tr").count() == 4
    page.locator("#ep-runs tbody tr").first.get_by_role("button").click()
    page.wait_for_selector("#ep-run-detail table")
    assert (
        "<b>not bold</b>" in page.locator("#ep-run-detail").inner_text()
    )  # evidence, as text
    assert [
        e for e in page.console_errors if "Content Security Policy" in e
    ] == []  # uPlot keeps to the CSP
    shot(page, "endpoint.png")


def test_restore_through_the_button_changes_the_state(
    page: Any, gateway: Gateway
) -> None:
    assert gateway.health("q/broken")["state"] == "demoted"
    sign_in(page, gateway)
    page.goto(gateway.root + "/admin#/endpoint/q%2Fbroken")
    page.wait_for_selector("#ep-facts .badge[data-state='demoted']")
    assert DEMOTE_REASON in page.locator("#ep-facts").inner_text()
    assert DEMOTE_REASON in page.locator("#ep-timeline").inner_text()
    page.get_by_role("button", name="Restore…").click()
    page.get_by_label("Reason (recorded with the action)").fill(
        "Upstream fixed, ticket OPS-42"
    )
    page.get_by_role("button", name="Confirm").click()
    page.wait_for_selector("#ep-facts .badge[data-state='healthy']")
    assert gateway.health("q/broken")["state"] == "healthy"
    actions = gateway.api("/admin/api/actions?endpoint=q%2Fbroken")["data"]
    assert (
        actions[0]["action"] == "restore"
        and actions[0]["reason"] == "Upstream fixed, ticket OPS-42"
    )
    assert actions[0]["actor"] == "dashboard"


def test_sign_out_blocks_access(page: Any, gateway: Gateway) -> None:
    sign_in(page, gateway)
    cookie = next(c for c in page.context.cookies() if c["name"] == "gw_admin_session")
    assert (
        cookie["httpOnly"]
        and cookie["sameSite"] == "Strict"
        and cookie["path"] == "/admin"
    )
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_selector("#view-login:not([hidden])")
    assert page.evaluate("fetch('/admin/api/health').then(r => r.status)") == 401
    # the old session id is dead on the server, not just forgotten by the browser
    old = httpx.get(
        gateway.root + "/admin/api/health",
        cookies={"gw_admin_session": cookie["value"]},
    )
    assert old.status_code == 401
    page.reload()
    page.wait_for_selector("#view-login:not([hidden])")
    assert page.locator("#view-overview").is_hidden()


def test_phone_width_has_no_page_overflow(browser: Any, gateway: Gateway) -> None:
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True
    )
    page = context.new_page()
    try:
        sign_in(page, gateway)
        assert page.evaluate(
            "document.documentElement.scrollWidth <= window.innerWidth + 1"
        )
        shot(page, "overview-phone.png")
    finally:
        context.close()


def test_probe_runs_page_filters_and_shows_a_run(page: Any, gateway: Gateway) -> None:
    sign_in(page, gateway)
    page.get_by_role("link", name="Probe runs").click()
    page.wait_for_selector("#probes-table tbody tr")
    assert page.locator("#probes-table tbody tr").count() == 4
    # The fleet's false discovery control (GET /admin/api/probes/fleet) is shown with its alpha.
    fleet = page.locator("#probes-fleet")
    expect(fleet).to_be_visible()
    expect(fleet).to_contain_text("Fleet FDR \u2264 0.1 (e-BH over")
    expect(fleet).to_contain_text("the next demotion needs e \u2265")
    page.get_by_label("Verdict").select_option("fail")
    expect(page.locator("#probes-table tbody tr")).to_have_count(
        1
    )  # (wait_for_function needs eval: CSP says no)
    page.locator("#probes-table tbody tr").first.get_by_role("button").click()
    page.wait_for_selector("#probe-detail table")
    assert "ks_output_length" in page.locator("#probe-detail").inner_text()
    expect(page.locator("#pr-audit")).to_be_disabled()  # an audit needs one endpoint chosen
    page.get_by_label("Endpoint", exact=True).select_option("r/m2")
    expect(page.locator("#pr-audit")).to_be_enabled()
    page.wait_for_selector("#probes-empty:not([hidden])")
    assert "No probe runs yet" in page.locator("#probes-empty").inner_text()


def test_spend_page_lists_keys_and_days(page: Any, gateway: Gateway) -> None:
    sign_in(page, gateway)
    page.get_by_role("link", name="Keys & spend").click()
    page.wait_for_selector("#spend-table tbody tr")
    assert (
        page.locator("#spend-table tbody tr").first.locator("td").first.inner_text()
        == "team-a"
    )
    assert page.locator("#spend-days tbody tr").count() >= 1
    shot(page, "spend.png")
