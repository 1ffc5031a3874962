/* Gateway admin dashboard: reads only the admin JSON API (/admin/api/...), with the session cookie.
 *
 * Every value from the API is put into the page with textContent (through el()), never innerHTML,
 * so names and messages that upstreams control render as text. No inline scripts or styles.
 */
(function () {
  "use strict";

  const POLL_MS = { overview: 4000, endpoint: 10000, probes: 10000, spend: 30000 };
  const DASH = "\u2014";
  let csrf = null; // the session's CSRF token, kept in memory only
  let timer = null;
  let view = null;
  const charts = [];

  // --- DOM helpers -------------------------------------------------------------------------

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  function show(node, on) { node.hidden = !on; }

  // --- formatting ----------------------------------------------------------------------------

  const none = (v) => v === null || v === undefined || (typeof v === "number" && !isFinite(v));
  const num = (v, d = 0) => none(v) ? DASH : Number(v).toLocaleString(undefined, { maximumFractionDigits: d, minimumFractionDigits: d });
  const pct = (v, d = 1) => none(v) ? DASH : (100 * v).toFixed(d) + "%";
  const ms = (v) => none(v) ? DASH : Math.round(v).toLocaleString() + " ms";
  const usd = (v, d = 4) => none(v) ? DASH : "$" + Number(v).toFixed(d);
  function when(v) {
    if (none(v) || v === "") return DASH;
    const d = typeof v === "number" ? new Date(v * 1000) : new Date(v);
    return isNaN(d) ? String(v) : d.toLocaleString();
  }
  function toEpoch(v) {
    if (typeof v === "number") return v;
    const t = Date.parse(v);
    return isNaN(t) ? null : t / 1000;
  }
  function badge(state, manual) {
    const s = state || "healthy";
    return el("span", { class: "badge state-" + s, "data-state": s }, s + (manual ? " (manual)" : ""));
  }
  function verdictText(v) {
    return el("span", { class: "verdict-" + (v || "running") }, v || "running");
  }

  // --- API -----------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message, code) { super(message); this.status = status; this.code = code; }
  }

  async function api(path, opts = {}) {
    const headers = { accept: "application/json" };
    if (opts.body !== undefined) headers["content-type"] = "application/json";
    if (opts.method && opts.method !== "GET" && csrf) headers["x-csrf-token"] = csrf;
    const res = await fetch(path, {
      method: opts.method || "GET",
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      credentials: "same-origin",
      cache: "no-store",
    });
    let data = null;
    try { data = await res.json(); } catch (e) { data = null; }
    if (!res.ok) {
      const err = (data && data.error) || {};
      if (res.status === 401 && !opts.signingIn) signedOut();
      throw new ApiError(res.status, err.message || res.statusText || "Request failed", err.code);
    }
    return data;
  }

  async function optional(path) {
    // Figures and probes need persistence: a 503 means "no data source", not a broken page.
    try { return { data: await api(path) }; } catch (e) {
      if (e.status === 401) throw e;
      return { error: e };
    }
  }

  // --- session -------------------------------------------------------------------------------

  function signedOut() {
    csrf = null;
    stopPolling();
    destroyCharts();
    show($("nav"), false);
    for (const v of document.querySelectorAll(".view")) show(v, false);
    show($("view-login"), true);
    $("login-key").focus();
  }

  async function signIn(event) {
    event.preventDefault();
    const input = $("login-key");
    $("login-error").textContent = "";
    try {
      const data = await api("/admin/ui/session", { method: "POST", body: { key: input.value }, signingIn: true });
      csrf = data.csrf_token;
      input.value = "";
      show($("view-login"), false);
      show($("nav"), true);
      route();
    } catch (e) {
      $("login-error").textContent = e.message;
    }
  }

  async function signOut() {
    try { await api("/admin/ui/session", { method: "DELETE" }); } catch (e) { /* already gone */ }
    location.hash = "#/";
    signedOut();
  }

  // --- routing and polling -------------------------------------------------------------------

  function stopPolling() { if (timer) { clearInterval(timer); timer = null; } }

  function poll(name, fn) {
    stopPolling();
    const tick = () => fn().catch((e) => { if (e.status !== 401) console.error(e); });
    tick();
    timer = setInterval(tick, POLL_MS[name]);
  }

  function route() {
    if (!csrf) return;
    const hash = location.hash || "#/";
    const m = hash.match(/^#\/endpoint\/(.+)$/);
    const name = m ? "endpoint" : hash === "#/probes" ? "probes" : hash === "#/spend" ? "spend" : "overview";
    if (name !== view) destroyCharts();
    view = name;
    for (const v of document.querySelectorAll(".view")) show(v, v.id === "view-" + name);
    for (const a of document.querySelectorAll("#nav a")) {
      if (a.dataset.view === name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
    if (name === "endpoint") {
      const id = decodeURIComponent(m[1]);
      endpointState.id = id;
      destroyCharts();
      poll("endpoint", () => loadEndpoint(id));
    } else if (name === "probes") poll("probes", loadProbes);
    else if (name === "spend") poll("spend", loadSpend);
    else poll("overview", loadOverview);
  }

  // --- sortable tables -----------------------------------------------------------------------

  function sortableHead(table, columns, sort, onSort) {
    const row = clear(table.tHead.rows[0] || table.tHead.appendChild(el("tr")));
    for (const col of columns) {
      const th = el("th", { scope: "col", class: col.num ? "num" : null });
      if (col.sort === false) th.textContent = col.label;
      else {
        th.setAttribute("aria-sort", sort.key === col.key ? (sort.dir > 0 ? "ascending" : "descending") : "none");
        th.append(el("button", { type: "button", class: "sort", onclick: () => onSort(col.key) }, col.label));
      }
      row.append(th);
    }
  }

  function compare(a, b) {
    if (none(a) && none(b)) return 0;
    if (none(a)) return 1;
    if (none(b)) return -1;
    return typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
  }

  function simpleHead(table, labels) {
    const tr = el("tr");
    for (const l of labels) tr.append(el("th", { scope: "col", class: l.endsWith(" ") ? "num" : null }, l.trim()));
    clear(table.tHead).append(tr);
  }

  // --- overview ------------------------------------------------------------------------------

  const STATE_ORDER = { demoted: 0, suspect: 1, probation: 2, healthy: 3 };
  const overview = { rows: [], sort: { key: "state", dir: 1 } };
  const OVERVIEW_COLUMNS = [
    { key: "provider", label: "Provider" },
    { key: "model", label: "Model" },
    { key: "region", label: "Region" },
    { key: "state", label: "State" },
    { key: "score", label: "Quality", num: true },
    { key: "requests", label: "Requests", num: true },
    { key: "error_rate", label: "Error rate", num: true },
    { key: "p50", label: "p50", num: true },
    { key: "p99", label: "p99", num: true },
    { key: "ttft", label: "TTFT p50", num: true },
    { key: "cache_hit_rate", label: "Cache hit", num: true },
    { key: "cost_per_m", label: "$ / 1M tok", num: true },
    { key: "probe", label: "Last probe" },
  ];

  async function loadOverview() {
    const window_ = $("ov-window").value;
    const [catalog, stats, health, runs] = await Promise.all([
      api("/admin/api/endpoints"),
      optional("/admin/api/endpoints/stats?windows=" + encodeURIComponent(window_)),
      optional("/admin/api/health"),
      optional("/admin/api/probes/runs?limit=500"),
    ]);
    const byId = new Map();
    for (const s of (stats.data && stats.data.data) || []) byId.set(s.id, s);
    const healthById = new Map();
    for (const h of (health.data && health.data.data) || []) healthById.set(h.endpoint, h);
    const lastRun = new Map();
    for (const r of (runs.data && runs.data.data) || []) if (!lastRun.has(r.endpoint_id)) lastRun.set(r.endpoint_id, r);

    overview.rows = catalog.data.map((ep) => {
      const s = byId.get(ep.id);
      const h = healthById.get(ep.id) || {};
      const w = s && s.windows ? s.windows[window_] : null;
      const tokens = w ? (w.prompt_tokens || 0) + (w.completion_tokens || 0) : 0;
      const run = lastRun.get(ep.id);
      return {
        id: ep.id, provider: ep.provider, model: ep.model, region: ep.region || null,
        state: s ? s.state : h.state || "healthy",
        manual: s ? s.manual : !!h.manual,
        reason: s ? s.state_reason : h.reason || "",
        score: s ? s.score : none(h.score) ? null : h.score,
        requests: w ? w.requests : null,
        error_rate: w && w.requests ? w.error_rate : null,
        p50: w && w.latency_ms ? w.latency_ms.p50 : null,
        p99: w && w.latency_ms ? w.latency_ms.p99 : null,
        ttft: w && w.ttft_ms ? w.ttft_ms.p50 : null,
        cache_hit_rate: w ? w.cache_hit_rate : null,
        cost_per_m: tokens ? (w.cost_usd / tokens) * 1e6 : null,
        probe: run ? run.verdict || "running" : null,
      };
    });
    const notice = $("overview-notice");
    if (stats.error) {
      notice.textContent = "Figures are unavailable (" + stats.error.message + "). Showing states only.";
      show(notice, true);
    } else show(notice, false);
    $("overview-updated").textContent = "Updated " + new Date().toLocaleTimeString();
    renderOverview();
  }

  function renderOverview() {
    const table = $("overview-table");
    sortableHead(table, OVERVIEW_COLUMNS, overview.sort, (key) => {
      overview.sort = { key, dir: overview.sort.key === key ? -overview.sort.dir : 1 };
      renderOverview();
    });
    const text = $("ov-filter").value.trim().toLowerCase();
    const state = $("ov-state").value;
    const rows = overview.rows.filter((r) =>
      (!state || r.state === state) &&
      (!text || [r.provider, r.model, r.region, r.id].some((v) => v && String(v).toLowerCase().includes(text))));
    const { key, dir } = overview.sort;
    const value = (r) => key === "state" ? STATE_ORDER[r.state] : r[key];
    rows.sort((a, b) => dir * compare(value(a), value(b)) || compare(a.id, b.id));
    const body = clear(table.tBodies[0]);
    for (const r of rows) {
      const tr = body.appendChild(el("tr", { "data-endpoint": r.id },
        el("td", {}, el("a", { href: "#/endpoint/" + encodeURIComponent(r.id), class: "provider" }, r.provider)),
        el("td", {}, r.model),
        el("td", {}, r.region || DASH),
        el("td", { class: "wrap" }, badge(r.state, r.manual), r.reason ? el("span", { class: "reason" }, r.reason) : null),
        el("td", { class: "num" }, num(r.score, 3)),
        el("td", { class: "num" }, num(r.requests)),
        el("td", { class: "num" }, pct(r.error_rate)),
        el("td", { class: "num" }, ms(r.p50)),
        el("td", { class: "num" }, ms(r.p99)),
        el("td", { class: "num" }, ms(r.ttft)),
        el("td", { class: "num" }, pct(r.cache_hit_rate)),
        el("td", { class: "num" }, usd(r.cost_per_m, 2)),
        el("td", {}, r.probe ? verdictText(r.probe) : DASH)));
      // Phone widths show each row as a card; CSS labels the cells from data-label.
      Array.from(tr.cells).forEach((td, i) => td.setAttribute("data-label", OVERVIEW_COLUMNS[i].label));
    }
    const empty = $("overview-empty");
    empty.textContent = overview.rows.length ? "No endpoints match the filter." : "No endpoints are configured yet.";
    show(empty, rows.length === 0);
  }

  // --- endpoint page -------------------------------------------------------------------------

  const endpointState = { id: null, action: null };
  const BUCKETS = { "1h": "1m", "6h": "5m", "24h": "15m", "7d": "1h" };

  function destroyCharts() {
    while (charts.length) charts.pop().destroy();
    clear($("ep-charts"));
    clear($("sp-charts"));
  }

  function chartBox(title, points, container) {
    const fig = el("figure", { class: "chart", "data-chart": title, "data-points": String(points) },
      el("figcaption", {}, title));
    (container || $("ep-charts")).append(fig);
    return fig;
  }

  function drawChart(title, xs, series, yLabel, container) {
    const points = series.length ? series[0].values.filter((v) => !none(v)).length : 0;
    const fig = chartBox(title, points, container);
    if (!xs.length || series.every((s) => s.values.every(none))) {
      fig.append(el("p", { class: "empty" }, "No data in this window yet."));
      return;
    }
    if (typeof uPlot === "undefined") {
      fig.append(el("p", { class: "empty" }, "The chart library did not load."));
      return;
    }
    const colors = ["#1f5fbf", "#c2410c", "#15803d", "#7c3aed"];
    const opts = {
      width: Math.max(260, fig.clientWidth - 16),
      height: 220,
      scales: { x: { time: true } },
      axes: [{}, { label: yLabel, size: 60 }],
      series: [{}, ...series.map((s, i) => ({
        label: s.label, stroke: s.color || colors[i % colors.length], width: 2, spanGaps: true,
        dash: s.dash, points: { show: true, size: 4 },
      }))],
    };
    const plot = new uPlot(opts, [xs, ...series.map((s) => s.values)], fig);
    plot.root.setAttribute("role", "img");
    plot.root.setAttribute("aria-label", title + " chart, " + points + " points");
    charts.push(plot);
  }

  async function loadEndpoint(id) {
    const window_ = $("ep-window").value;
    const q = "endpoint=" + encodeURIComponent(id);
    const [catalog, stats, series, transitions, runs] = await Promise.all([
      api("/admin/api/endpoints"),
      optional("/admin/api/endpoints/stats?windows=" + encodeURIComponent(window_)),
      optional("/admin/api/endpoints/timeseries?" + q + "&window=" + window_ + "&bucket=" + BUCKETS[window_]),
      optional("/admin/api/health/transitions?" + q + "&limit=100"),
      optional("/admin/api/probes/runs?" + q + "&limit=20"),
    ]);
    if (endpointState.id !== id) return; // navigated away meanwhile
    const ep = catalog.data.find((e) => e.id === id);
    if (!ep) {
      $("ep-title").textContent = "Unknown endpoint";
      clear($("ep-facts"));
      destroyCharts();
      return;
    }
    let health = (stats.data && stats.data.data.find((s) => s.id === id)) || null;
    if (!health) {
      const h = await optional("/admin/api/health");
      const entry = h.data && h.data.data.find((x) => x.endpoint === id);
      health = entry ? { state: entry.state, manual: entry.manual, score: entry.score, state_reason: entry.reason } : { state: "healthy" };
    }
    renderEndpointHead(ep, health, stats.data ? health.windows && health.windows[window_] : null);
    const runDetails = await loadRunDetails((runs.data && runs.data.data) || []);
    renderCharts(series, runDetails);
    renderTimeline(transitions);
    renderRuns($("ep-runs"), $("ep-runs-empty"), runs, false);
    const notice = $("ep-notice");
    const failed = [series, transitions, runs].find((r) => r.error);
    notice.textContent = failed ? "Some history is unavailable (" + failed.error.message + ")." : "";
    show(notice, !!failed);
  }

  function renderEndpointHead(ep, health, w) {
    $("ep-title").textContent = ep.provider + " / " + ep.model;
    const facts = clear($("ep-facts"));
    const fact = (label, ...value) => facts.append(el("div", {}, el("dt", {}, label), el("dd", {}, ...value)));
    fact("State", badge(health.state, health.manual));
    fact("Reason", health.state_reason || DASH);
    fact("Quality score", num(health.score, 3));
    fact("Region", ep.region || DASH);
    fact("Endpoint id", ep.id);
    fact("Breaker", (health.breaker && health.breaker.state) || (ep.breaker && ep.breaker.state) || DASH);
    fact("Requests", w ? num(w.requests) : DASH);
    fact("Error rate", w && w.requests ? pct(w.error_rate) : DASH);
    fact("Latency p50 / p99", w && w.latency_ms ? ms(w.latency_ms.p50) + " / " + ms(w.latency_ms.p99) : DASH);
    fact("List price in / out per 1M", ep.price ? usd(ep.price.input, 2) + " / " + usd(ep.price.output, 2) : DASH);
    const demoted = health.state === "demoted";
    $("ep-demote").disabled = demoted && health.manual;
    $("ep-restore").disabled = health.state === "healthy" && !health.manual;
  }

  async function loadRunDetails(runs) {
    const done = runs.filter((r) => r.verdict).slice(0, 20);
    const out = await Promise.all(done.map((r) => optional("/admin/api/probes/runs/" + encodeURIComponent(r.id))));
    return out.filter((r) => r.data).map((r) => r.data);
  }

  function renderCharts(series, runDetails) {
    destroyCharts();
    const rows = (series.data && series.data.data) || [];
    const bucket = (series.data && series.data.bucket_s) || 60;
    const xs = rows.map((r) => r.start);
    const col = (f) => rows.map(f);
    drawChart("Latency", xs, [
      { label: "avg ms", values: col((r) => r.latency_ms_avg) },
      { label: "max ms", values: col((r) => r.latency_ms_max) },
      { label: "TTFT avg ms", values: col((r) => r.ttft_ms_avg) },
    ], "ms");
    drawChart("Error rate", xs, [{ label: "error %", values: col((r) => r.requests ? (100 * r.errors) / r.requests : null), color: "#a61b1b" }], "%");
    drawChart("Throughput", xs, [{ label: "requests/min", values: col((r) => (r.requests * 60) / bucket) }], "req/min");
    drawChart("Cached-token share", xs, [{ label: "cached %", values: col((r) => none(r.cache_hit_rate) ? null : 100 * r.cache_hit_rate) }], "%");
    // One chart per probe: its statistic per run, and its threshold when the probe recorded one.
    const probes = new Map();
    for (const run of runDetails.slice().reverse()) {
      for (const res of run.results || []) {
        if (none(res.statistic)) continue;
        const x = toEpoch(res.at || run.started_at);
        if (x === null) continue;
        const threshold = res.details && !none(res.details.threshold) ? Number(res.details.threshold) : null;
        if (!probes.has(res.probe)) probes.set(res.probe, []);
        probes.get(res.probe).push([x, res.statistic, threshold]);
      }
    }
    for (const [name, pts] of probes) {
      pts.sort((a, b) => a[0] - b[0]);
      const s = [{ label: "statistic", values: pts.map((p) => p[1]) }];
      if (pts.some((p) => p[2] !== null)) s.push({ label: "threshold", values: pts.map((p) => p[2]), color: "#a61b1b", dash: [6, 4] });
      drawChart("Probe: " + name, pts.map((p) => p[0]), s, "statistic");
    }
  }

  function renderTimeline(transitions) {
    const list = clear($("ep-timeline"));
    const rows = (transitions.data && transitions.data.data) || [];
    for (const t of rows) {
      list.append(el("li", {},
        el("time", { datetime: String(t.at) }, when(t.at)),
        badge(t.from_state), " \u2192 ", badge(t.to_state, t.manual),
        " ", el("span", { class: "muted" }, "by " + (t.source || "?")),
        el("span", { class: "why" }, t.reason || DASH)));
    }
    const empty = $("ep-timeline-empty");
    empty.textContent = transitions.error ? "Transitions are unavailable: " + transitions.error.message : "No state transitions recorded for this endpoint yet.";
    show(empty, rows.length === 0);
  }

  function renderRuns(table, empty, runs, withEndpoint) {
    const labels = ["Started", ...(withEndpoint ? ["Endpoint"] : []), "Suite", "Trigger", "Verdict", "Tokens ", "Cost ", "Results"];
    simpleHead(table, labels);
    const body = clear(table.tBodies[0]);
    const rows = (runs.data && runs.data.data) || [];
    for (const r of rows) {
      const cell = el("td", {});
      const tr = el("tr", {},
        el("td", {}, when(r.started_at)),
        withEndpoint ? el("td", {}, el("a", { href: "#/endpoint/" + encodeURIComponent(r.endpoint_id) }, r.endpoint_id)) : null,
        el("td", {}, r.suite), el("td", {}, r.trigger), el("td", {}, verdictText(r.verdict)),
        el("td", { class: "num" }, num(r.tokens_spent)), el("td", { class: "num" }, usd(r.cost_usd)), cell);
      cell.append(el("button", { type: "button", "aria-label": "Show results of run " + r.id, onclick: () => showRun(r.id) }, "View"));
      body.append(tr);
    }
    empty.textContent = runs.error ? "Probe runs are unavailable: " + runs.error.message : "No probe runs yet. Runs appear here once the probes run.";
    show(empty, rows.length === 0);
    return rows.length;
  }

  async function showRun(id) {
    const panel = $(view === "endpoint" ? "ep-run-detail" : "probe-detail");
    clear(panel);
    show(panel, true);
    let run;
    try { run = await api("/admin/api/probes/runs/" + encodeURIComponent(id)); } catch (e) {
      panel.append(el("p", { class: "error" }, e.message));
      return;
    }
    panel.append(
      el("h2", {}, "Run " + run.id + " \u00b7 " + run.suite + " \u00b7 " + run.endpoint_id),
      el("p", {}, "Verdict: ", verdictText(run.verdict), " \u00b7 started " + when(run.started_at) + " \u00b7 finished " + when(run.finished_at)));
    if (run.details) panel.append(el("pre", { class: "evidence" }, JSON.stringify(run.details, null, 2)));
    const table = el("table", { class: "data" }, el("thead"), el("tbody"));
    simpleHead(table, ["Probe", "Verdict", "Statistic ", "p-value ", "e-value ", "Samples ", "Reference ", "Tokens ", "Evidence"]);
    for (const r of run.results || []) {
      table.tBodies[0].append(el("tr", {},
        el("td", {}, r.probe), el("td", {}, verdictText(r.verdict)),
        el("td", { class: "num" }, num(r.statistic, 4)), el("td", { class: "num" }, num(r.p_value, 4)),
        el("td", { class: "num" }, num(r.e_value, 3)), el("td", { class: "num" }, num(r.samples)),
        el("td", { class: "num" }, num(r.reference_samples)), el("td", { class: "num" }, num(r.tokens_spent)),
        el("td", { class: "wrap" }, r.details ? el("pre", { class: "evidence" }, JSON.stringify(r.details, null, 2)) : DASH)));
    }
    panel.append(el("div", { class: "table-wrap" }, table));
    if (!(run.results || []).length) panel.append(el("p", { class: "empty" }, "This run recorded no results."));
  }

  // --- demote / restore ----------------------------------------------------------------------

  function openAction(action) {
    endpointState.action = action;
    $("action-title").textContent = (action === "demote" ? "Demote " : "Restore ") + $("ep-title").textContent;
    $("action-reason").value = "";
    $("action-error").textContent = "";
    $("action-dialog").showModal();
    $("action-reason").focus();
  }

  async function submitAction(event) {
    event.preventDefault();
    const reason = $("action-reason").value.trim();
    if (!reason) { $("action-error").textContent = "Say why: the reason is recorded."; return; }
    try {
      await api("/admin/api/health/" + endpointState.action, {
        method: "POST", body: { endpoint: endpointState.id, reason, actor: "dashboard" },
      });
      $("action-dialog").close();
      await loadEndpoint(endpointState.id);
    } catch (e) {
      $("action-error").textContent = e.message;
    }
  }

  // --- probe runs page -----------------------------------------------------------------------

  async function loadProbes() {
    const select = $("pr-endpoint");
    const catalog = await api("/admin/api/endpoints");
    const chosen = select.value;
    if (select.options.length !== catalog.data.length + 1) {
      while (select.options.length > 1) select.remove(1);
      for (const ep of catalog.data) select.append(el("option", { value: ep.id }, ep.provider + " / " + ep.model + " (" + ep.id + ")"));
      select.value = chosen;
    }
    const q = select.value ? "&endpoint=" + encodeURIComponent(select.value) : "";
    const runs = await optional("/admin/api/probes/runs?limit=200" + q);
    const verdict = $("pr-verdict").value;
    if (runs.data && verdict) runs.data = { data: runs.data.data.filter((r) => (r.verdict || "running") === verdict) };
    renderRuns($("probes-table"), $("probes-empty"), runs, true);
    renderFleet($("probes-fleet"), await optional("/admin/api/probes/fleet"));
    $("pr-audit").disabled = auditing || !select.value;
    show($("probes-notice"), false);
  }

  // The audit round's false discovery control (GET /admin/api/probes/fleet): demotions across the
  // fleet go through e-BH at FDR alpha; demotion k of the round needs e >= n / (alpha k).
  function renderFleet(node, fleet) {
    const f = fleet.data;
    if (!f || !f.method) {
      node.textContent = f && f.reason ? f.reason : "";
      show(node, !!(f && f.reason));
      return;
    }
    node.textContent = "Fleet FDR \u2264 " + f.alpha + " (" + f.method + " over " + f.n + " endpoints this round): "
      + f.demoted + " demoted, " + f.held + " held back; the next demotion needs e \u2265 "
      + num(f.next_threshold != null ? f.next_threshold : f.n / f.alpha) + ".";
    node.dataset.alpha = String(f.alpha);
    show(node, true);
  }

  // --- on-demand audit (POST /admin/api/probes/run streams NDJSON events, then a summary) ------

  let auditing = false;

  function auditEvent(e, status) {
    if (e.event === "progress") status.textContent = "Auditing " + e.endpoint + ": " + e.probe + " " + e.done + "/" + e.total;
    else if (e.event === "result") status.textContent = "Auditing " + e.endpoint + ": " + e.probe + " " + e.verdict;
    else if (e.event === "error") throw new Error(e.message);
  }

  async function startAudit() {
    const id = $("pr-endpoint").value;
    const status = $("pr-audit-status");
    if (!id || auditing) return;
    auditing = true;
    $("pr-audit").disabled = true;
    status.removeAttribute("data-verdict");
    status.textContent = "Auditing " + id + "\u2026";
    try {
      const headers = { "content-type": "application/json", accept: "application/x-ndjson" };
      if (csrf) headers["x-csrf-token"] = csrf;
      const res = await fetch("/admin/api/probes/run", {
        method: "POST", headers, body: JSON.stringify({ endpoint: id }), credentials: "same-origin", cache: "no-store",
      });
      if (!res.ok) {
        let message = res.statusText;
        try { message = (await res.json()).error.message; } catch (e) { /* not JSON */ }
        throw new Error(message);
      }
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "", summary = null;
      for (;;) {
        const { value, done } = await reader.read();
        buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
        const lines = buffer.split("\n");
        buffer = lines.pop();
        for (const line of lines.filter((l) => l.trim())) {
          const e = JSON.parse(line);
          if (e.event === "summary") summary = e; else auditEvent(e, status);
        }
        if (done) break;
      }
      if (!summary) throw new Error("the audit ended without a summary");
      const run = summary.runs[0];
      const moves = run.transitions.map((t) => t.from + " \u2192 " + t.to).join(", ");
      status.textContent = "Audit of " + id + ": " + summary.verdict.toUpperCase() + ", now " + run.state +
        (moves ? " (" + moves + ")" : "") + ".";
      status.setAttribute("data-verdict", summary.verdict);
      await loadProbes();
    } catch (e) {
      status.textContent = "The audit failed: " + e.message;
      status.setAttribute("data-verdict", "error");
    } finally {
      auditing = false;
      $("pr-audit").disabled = !$("pr-endpoint").value;
    }
  }

  // --- keys and spend ------------------------------------------------------------------------

  // Limits, this period's spend and what is left of the budget (live where the limiter counts it).
  function budgetCells(r) {
    const budget = none(r.budget_usd) ? DASH : usd(r.budget_usd, 2) + " / " + r.budget_period;
    return [el("td", { class: "num" }, num(r.rpm === undefined ? r.rpm_limit : r.rpm)),
      el("td", { class: "num" }, num(r.tpm === undefined ? r.tpm_limit : r.tpm)),
      el("td", { class: "num" }, num(r.max_parallel)), el("td", {}, budget),
      el("td", { class: "num" }, usd(r.spend_usd, 2)), el("td", { class: "num" }, usd(r.remaining_usd, 2)),
      el("td", {}, none(r.budget_resets_at) ? DASH : when(r.budget_resets_at))];
  }

  function renderLimits(tableId, emptyId, result, first, cells, what) {
    const rows = (result.data && result.data.data) || [];
    const table = $(tableId);
    simpleHead(table, [...first, "RPM ", "TPM ", "Parallel ", "Budget", "Spent ", "Left ", "Resets"]);
    const body = clear(table.tBodies[0]);
    for (const r of rows) body.append(el("tr", {}, ...cells(r), ...budgetCells(r)));
    const empty = $(emptyId);
    empty.textContent = result.error ? what + " are unavailable: " + result.error.message : "No " + what.toLowerCase() + " in the database.";
    show(empty, rows.length === 0);
    show(table.parentNode, rows.length > 0);
  }

  async function loadKeys() {
    const [keys, teams] = await Promise.all([optional("/admin/api/keys"), optional("/admin/api/teams")]);
    renderLimits("keys-table", "keys-empty", keys, ["Key", "Team", "Status"],
      (k) => [el("td", {}, k.name), el("td", {}, k.team || DASH), el("td", {}, k.status)], "Keys");
    renderLimits("teams-table", "teams-empty", teams, ["Team", "Keys "],
      (t) => [el("td", {}, t.name), el("td", { class: "num" }, num(t.keys.length))], "Teams");
  }

  // Daily cost per key or team (the top ones by cost): one line each over the period's days.
  function spendChart(title, rows, label) {
    const top = rows.slice(0, 8);
    const days = [...new Set(top.flatMap((r) => r.days.map((d) => d.day)))].sort();
    const xs = days.map((d) => Date.parse(d + "T00:00:00Z") / 1000);
    const series = top.map((r) => {
      const cost = new Map(r.days.map((d) => [d.day, d.cost_usd]));
      return { label: label(r), values: days.map((d) => cost.get(d) || 0) };
    });
    drawChart(title, xs, series, "USD", $("sp-charts"));
  }

  function renderTeamSpend(result) {
    const rows = (result.data && result.data.data) || [];
    const table = $("team-spend");
    simpleHead(table, ["Team", "Keys ", "Requests ", "Prompt tokens ", "Completion tokens ", "Cost "]);
    const body = clear(table.tBodies[0]);
    for (const t of rows) {
      body.append(el("tr", {}, el("td", {}, t.team), el("td", { class: "num" }, num(t.keys.length)),
        el("td", { class: "num" }, num(t.requests)), el("td", { class: "num" }, num(t.prompt_tokens)),
        el("td", { class: "num" }, num(t.completion_tokens)), el("td", { class: "num" }, usd(t.cost_usd))));
    }
    const days = $("team-spend-days");
    simpleHead(days, ["Day", "Team", "Requests ", "Cost "]);
    const dayBody = clear(days.tBodies[0]);
    const perDay = rows.flatMap((t) => t.days.map((d) => ({ team: t.team, ...d })));
    perDay.sort((a, b) => compare(b.day, a.day) || compare(a.team, b.team));
    for (const d of perDay) {
      dayBody.append(el("tr", {}, el("td", {}, d.day), el("td", {}, d.team), el("td", { class: "num" }, num(d.requests)),
        el("td", { class: "num" }, usd(d.cost_usd))));
    }
    const empty = $("team-spend-empty");
    empty.textContent = result.error ? "Team spend is unavailable: " + result.error.message : "No team spend recorded in this period yet.";
    show(empty, rows.length === 0);
    show(table.parentNode, rows.length > 0);
    show(days.parentNode, perDay.length > 0);
    return rows;
  }

  async function loadSpend() {
    await loadKeys();
    const period = encodeURIComponent($("sp-days").value);
    const [spend, teamSpend] = await Promise.all([
      optional("/admin/api/spend?days=" + period), optional("/admin/api/spend/teams?days=" + period)]);
    const teamRows = renderTeamSpend(teamSpend);
    destroyCharts();
    spendChart("Daily spend per key", (spend.data && spend.data.data) || [], (k) => k.key || "(no key)");
    spendChart("Daily spend per team", teamRows, (t) => t.team);
    const rows = (spend.data && spend.data.data) || [];
    const table = $("spend-table");
    simpleHead(table, ["Key", "Requests ", "Prompt tokens ", "Cached tokens ", "Completion tokens ", "Cost "]);
    const body = clear(table.tBodies[0]);
    for (const k of rows) {
      body.append(el("tr", {}, el("td", {}, k.key || "(no key)"), el("td", { class: "num" }, num(k.requests)),
        el("td", { class: "num" }, num(k.prompt_tokens)), el("td", { class: "num" }, num(k.cached_tokens)),
        el("td", { class: "num" }, num(k.completion_tokens)), el("td", { class: "num" }, usd(k.cost_usd))));
    }
    const days = $("spend-days");
    simpleHead(days, ["Day", "Key", "Requests ", "Prompt tokens ", "Cached tokens ", "Completion tokens ", "Cost "]);
    const dayBody = clear(days.tBodies[0]);
    const perDay = rows.flatMap((k) => k.days.map((d) => ({ key: k.key, ...d })));
    perDay.sort((a, b) => compare(b.day, a.day) || compare(a.key, b.key));
    for (const d of perDay) {
      dayBody.append(el("tr", {}, el("td", {}, d.day), el("td", {}, d.key || "(no key)"), el("td", { class: "num" }, num(d.requests)),
        el("td", { class: "num" }, num(d.prompt_tokens)), el("td", { class: "num" }, num(d.cached_tokens)),
        el("td", { class: "num" }, num(d.completion_tokens)), el("td", { class: "num" }, usd(d.cost_usd))));
    }
    const empty = $("spend-empty");
    empty.textContent = spend.error ? "Spend is unavailable: " + spend.error.message : "No spend recorded in this period yet.";
    show(empty, rows.length === 0);
    show(days.parentNode, perDay.length > 0);
  }

  // --- start ---------------------------------------------------------------------------------

  async function start() {
    $("login-form").addEventListener("submit", signIn);
    $("sign-out").addEventListener("click", signOut);
    $("ov-filter").addEventListener("input", renderOverview);
    $("ov-state").addEventListener("change", renderOverview);
    $("ov-window").addEventListener("change", () => loadOverview().catch(console.error));
    $("ep-window").addEventListener("change", () => route());
    $("pr-endpoint").addEventListener("change", () => loadProbes().catch(console.error));
    $("pr-verdict").addEventListener("change", () => loadProbes().catch(console.error));
    $("pr-audit").addEventListener("click", () => startAudit());
    $("sp-days").addEventListener("change", () => loadSpend().catch(console.error));
    $("ep-demote").addEventListener("click", () => openAction("demote"));
    $("ep-restore").addEventListener("click", () => openAction("restore"));
    $("action-form").addEventListener("submit", submitAction);
    $("action-cancel").addEventListener("click", () => $("action-dialog").close());
    window.addEventListener("hashchange", route);
    window.addEventListener("resize", () => {
      for (const c of charts) c.setSize({ width: Math.max(260, c.root.parentNode.clientWidth - 16), height: 220 });
    });
    try {
      const s = await api("/admin/ui/session", { signingIn: true });
      csrf = s.csrf_token;
      show($("nav"), true);
      route();
    } catch (e) {
      signedOut();
    }
  }

  document.addEventListener("DOMContentLoaded", start);
})();
