// llmflow console: plain JavaScript over the admin API (adminapi's
// routes). Every value reaches the page through textContent or an SVG
// attribute, never as HTML.
"use strict";

const state = { session: null, self: null, tab: null, timer: null };

// el builds an element: attributes (class, id, other attributes, on*
// handlers) and children (strings become text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// gh formats GPU-hours as the console shows them everywhere: 4 decimals.
function gh(v) { return Number(v || 0).toFixed(4); }

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// api calls the admin API (or the console's routes) with the session
// cookie; writes carry the session's CSRF token.
async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (method !== "GET" && state.session && state.session.csrf) headers["X-LLMflow-CSRF"] = state.session.csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!resp.ok) {
    const msg = data && data.error && data.error.message ? data.error.message : resp.status + " " + resp.statusText;
    if (resp.status === 401 && path.startsWith("/admin/")) { showSignin(msg); }
    throw new APIError(resp.status, msg);
  }
  return data;
}

function $(id) { return document.getElementById(id); }

function showSignin(msg) {
  stopTimer();
  $("signin").hidden = false;
  $("view").replaceChildren();
  $("tabs").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  $("sso-box").hidden = !(state.session && state.session.oidc);
  $("signin-error").textContent = msg || "";
  if (!window.isSecureContext) {
    // the session cookie is Secure: a browser keeps it over https and on localhost only
    $("signin-error").textContent = "This page is not served over HTTPS, so your browser will not keep the sign-in: open it with https:// (a TLS proxy, or the tls block) or through an SSH tunnel to localhost. " + (msg || "");
  }
}

function stopTimer() { if (state.timer) { clearInterval(state.timer); state.timer = null; } }

async function start() {
  $("token-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      state.session = await api("POST", "/console/login/token", { token: $("token").value });
      $("token").value = "";
      await signedIn();
    } catch (e) { $("signin-error").textContent = e.message; }
  });
  $("logout").addEventListener("click", async () => {
    let out = null;
    try { out = await api("POST", "/console/logout"); } catch (e) { /* signed out anyway */ }
    state.session = { oidc: state.session && state.session.oidc };
    if (out && out.end_session_url) { window.location.assign(out.end_session_url); return; } // sign out at the provider too
    showSignin("Signed out.");
  });
  state.session = await api("GET", "/console/session");
  if (!state.session.signed_in) { showSignin(""); return; }
  await signedIn();
}

const TABS = [
  { id: "overview", label: "Overview", show: () => true, render: renderOverview },
  { id: "share", label: "Fair share", show: (r) => r.reader, render: renderShare },
  { id: "budgets", label: "Budgets", show: (r) => r.reader, render: renderBudgets },
  { id: "keys", label: "Keys", show: () => true, render: renderKeys },
  { id: "users", label: "Users", show: (r) => r.reader, render: renderUsers },
  { id: "audit", label: "Audit", show: (r) => r.reader, render: renderAudit },
  { id: "syncs", label: "Slurm syncs", show: (r) => r.reader, render: renderSyncs },
];

function rights() {
  const s = state.self;
  const roles = s.roles || [];
  const reader = s.kind === "master_key" || roles.some((g) => g.role !== "member");
  const manager = s.kind === "master_key" || roles.some((g) => ["proxy_admin", "org_admin", "team_admin"].includes(g.role));
  const member = roles.some((g) => g.role === "member");
  return { reader, manager, member };
}

async function signedIn() {
  $("signin").hidden = true;
  state.self = await api("GET", "/admin/self");
  const s = state.self;
  const roles = (s.roles || []).map((g) => g.role + (g.team ? "@" + g.team : g.org ? "@" + g.org : "")).join(", ");
  $("who").textContent = s.name + (s.kind === "master_key" ? " (master key)" : roles ? " — " + roles : " — no role");
  $("logout").hidden = false;
  const r = rights();
  const nav = $("tabs");
  nav.replaceChildren();
  for (const t of TABS) {
    if (!t.show(r)) continue;
    nav.append(el("button", { type: "button", id: "tab-" + t.id, onclick: () => openTab(t) }, t.label));
  }
  nav.hidden = false;
  openTab(TABS[0]);
}

async function openTab(t) {
  stopTimer();
  state.tab = t.id;
  for (const b of $("tabs").children) b.classList.toggle("active", b.id === "tab-" + t.id);
  const view = $("view");
  view.replaceChildren(el("p", { class: "muted" }, "Loading…"));
  try {
    await t.render(view);
  } catch (e) {
    view.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

// ---- overview: my budgets and GPU-hours per day

async function renderOverview(view) {
  const s = await api("GET", "/admin/self");
  state.self = s;
  const parts = [el("h1", {}, "Overview")];
  parts.push(el("h2", {}, s.kind === "master_key" ? "Budgets" : "Budgets you draw on"));
  parts.push(budgetTable(s.budgets, "self"));
  parts.push(el("h2", {}, "GPU-hours per day"));
  const chartBox = el("div", { class: "card", id: "chart" });
  const today = new Date(); today.setUTCHours(0, 0, 0, 0);
  const from = el("input", { id: "chart-from", type: "date", value: isoDay(new Date(today.getTime() - 13 * 86400000)) });
  const to = el("input", { id: "chart-to", type: "date", value: isoDay(today) });
  const days = el("select", { id: "chart-days" }, [7, 14, 30, 90].map((d) => el("option", { value: d, selected: d === 14 }, "last " + d + " days")));
  days.addEventListener("change", () => { from.value = isoDay(new Date(today.getTime() - (Number(days.value) - 1) * 86400000)); to.value = isoDay(today); });
  const group = el("select", { id: "chart-group" }, ["org", "team", "model", "key"].map((g) => el("option", { value: g }, g)));
  const draw = () => drawUsage(chartBox, from.value, to.value, group.value).catch((e) => chartBox.replaceChildren(el("p", { class: "error" }, e.message)));
  days.addEventListener("change", draw);
  from.addEventListener("change", draw);
  to.addEventListener("change", draw);
  group.addEventListener("change", draw);
  parts.push(el("form", { class: "inline" }, el("label", {}, "Range", days), el("label", {}, "From", from), el("label", {}, "To", to),
    el("label", {}, "Stacked by", group)), chartBox);
  view.replaceChildren(...parts);
  draw();
}

function budgetTable(list, prefix) {
  if (!list || list.length === 0) return el("p", { class: "muted", id: prefix + "-budgets-none" }, "No budget applies.");
  return el("table", { id: prefix + "-budgets" },
    el("tr", {}, el("th", {}, "Scope"), el("th", {}, "Model"), el("th", {}, "Period"), el("th", { class: "num" }, "Spent"),
      el("th", { class: "num" }, "Held"), el("th", { class: "num" }, "Limit"), el("th", { class: "num" }, "Remaining"), el("th", {}, "")),
    list.map((b) => {
      const lim = b.effective_limit || b.max_cost || 0;
      const spentPct = lim > 0 ? Math.min(100, (100 * b.spent) / lim) : 0;
      const heldPct = lim > 0 ? Math.min(100 - spentPct, (100 * b.held) / lim) : 0;
      const bar = el("div", { class: "bar", title: gh(b.spent) + " spent, " + gh(b.held) + " held" });
      const sp = el("span"); sp.style.width = spentPct + "%"; sp.style.float = "left";
      const hd = el("span", { class: "held" }); hd.style.width = heldPct + "%"; hd.style.float = "left";
      bar.append(sp, hd);
      const id = prefix + "-budget-" + b.kind + "-" + b.name + (b.model ? "-" + b.model : "");
      return el("tr", { id },
        el("td", {}, b.kind + " " + b.name), el("td", {}, b.model || "all"), el("td", {}, b.period),
        el("td", { class: "num" }, gh(b.spent)), el("td", { class: "num" }, gh(b.held)), el("td", { class: "num" }, gh(lim)),
        el("td", { class: "num", id: id + "-remaining" }, gh(b.remaining)), el("td", {}, bar));
    }));
}

function isoDay(d) { return d.toISOString().slice(0, 10); }

// drawUsage draws the GPU-hours of each UTC day from first to last
// (YYYY-MM-DD, at most 92 days), stacked by group: one /admin/spend call
// per day.
async function drawUsage(box, first, last, group) {
  box.replaceChildren(el("p", { class: "muted" }, "Loading…"));
  const start = Date.parse(first + "T00:00:00Z"), end = Date.parse(last + "T00:00:00Z");
  if (isNaN(start) || isNaN(end) || end < start) throw new Error("choose a first day before the last");
  const ndays = Math.round((end - start) / 86400000) + 1;
  if (ndays > 92) throw new Error("at most 92 days at a time");
  const days = [];
  for (let i = 0; i < ndays; i++) days.push(new Date(start + i * 86400000));
  const answers = await Promise.all(days.map((d) => api("GET", "/admin/spend?from=" + isoDay(d) + "&to=" + isoDay(new Date(d.getTime() + 86400000)) + "&group_by=" + group)));
  const series = new Map();
  answers.forEach((a, i) => {
    for (const row of a.data || []) {
      const name = row[group] || "(none)";
      if (!series.has(name)) series.set(name, new Array(ndays).fill(0));
      series.get(name)[i] += row.gpu_hours || 0;
    }
  });
  const names = [...series.keys()].sort();
  const totals = days.map((_, i) => names.reduce((s, n) => s + series.get(n)[i], 0));
  const max = Math.max(...totals, 0);
  const W = 900, H = 260, L = 60, B = 30, T = 10;
  const plotW = W - L - 10, plotH = H - B - T, bw = plotW / ndays;
  const g = svg("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img", "aria-label": "GPU-hours per day", id: "usage-svg" });
  g.append(svg("line", { x1: L, y1: T + plotH, x2: W - 10, y2: T + plotH, stroke: "#5b6475" }));
  const ticks = 4;
  for (let i = 0; i <= ticks; i++) {
    const v = (max * i) / ticks, y = T + plotH - (plotH * i) / ticks;
    g.append(svg("line", { x1: L, y1: y, x2: W - 10, y2: y, stroke: "#d8dde6" }));
    g.append(svg("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, max > 0 ? v.toPrecision(3) : "0"));
  }
  const colours = ["#2457c5", "#e6a23c", "#1e7b34", "#b3261e", "#7b3fb3", "#10828a", "#8a6d10", "#5b6475"];
  days.forEach((d, i) => {
    let y = T + plotH;
    names.forEach((n, j) => {
      const v = series.get(n)[i];
      if (v <= 0 || max <= 0) return;
      const h = (plotH * v) / max;
      y -= h;
      const r = svg("rect", { x: L + i * bw + 2, y, width: Math.max(bw - 4, 1), height: h, fill: colours[j % colours.length] });
      r.append(svg("title", {}, n + " " + isoDay(d) + ": " + gh(v) + " GPU-hours"));
      g.append(r);
    });
    if (i % Math.ceil(ndays / 15) === 0) g.append(svg("text", { x: L + i * bw + bw / 2, y: H - 10, "text-anchor": "middle" }, isoDay(d).slice(5)));
  });
  const legend = el("div", { class: "legend" }, names.map((n, j) => el("span", {}, el("span", { class: "swatch s" + (j % colours.length) }), n + " " + gh(series.get(n).reduce((a, b) => a + b, 0)))));
  box.replaceChildren(g, names.length ? legend : el("p", { class: "muted" }, "No usage in this range."),
    el("p", { class: "muted", id: "usage-total" }, "Total: " + gh(totals.reduce((a, b) => a + b, 0)) + " GPU-hours"));
}

// ---- fair share: the tree, live

async function renderShare(view) {
  const draw = async () => {
    const rep = await api("GET", "/admin/fairshare");
    const parts = [el("h1", {}, "Fair share"), el("p", { class: "muted" }, "Live: refreshed every 5 s. Reservations are apportioned down the tree; borrowing is in flight beyond the organisation's reservation.")];
    for (const p of rep.pools || []) {
      parts.push(el("h2", {}, "Pool " + p.pool + " — capacity " + p.capacity + ", " + p.in_flight + " in flight, " + p.borrowing + " borrowing" + (p.queued ? ", " + p.queued + " queued" : "") + " (" + p.scheduler + ")"));
      parts.push(el("table", { id: "share-" + p.pool },
        el("tr", {}, ["Account", "User", "Shares", "Norm shares", "Reserved", "In flight", "Within", "Borrowing", "Usage (GPU-h)", "LevelFS", "Rank"].map((h, i) => el("th", { class: i >= 2 ? "num" : "" }, h))),
        (p.accounts || []).map((a) => el("tr", {},
          el("td", { class: "indent" + Math.min(a.depth, 4) }, a.account),
          el("td", {}, a.user || ""),
          el("td", { class: "num" }, a.depth === 0 ? "" : a.use_parent ? "parent" : String(a.raw_shares)),
          el("td", { class: "num" }, Number(a.norm_shares).toFixed(4)),
          el("td", { class: "num" }, a.reserved), el("td", { class: "num" }, a.in_flight), el("td", { class: "num" }, a.within),
          el("td", { class: "num" }, a.borrowing), el("td", { class: "num" }, gh(a.raw_usage)),
          el("td", { class: "num" }, a.level_fs === null ? "" : String(a.level_fs)), el("td", { class: "num" }, a.rank)))));
    }
    if (state.tab === "share") view.replaceChildren(...parts);
  };
  await draw();
  state.timer = setInterval(() => draw().catch(() => {}), 5000);
}

// renderBudgets lists every budget the caller may read; managers set one
// (PUT /admin/budgets: the API says who may set which kind).
async function renderBudgets(view) {
  const l = await api("GET", "/admin/budgets");
  const parts = [el("h1", {}, "Budgets")];
  if (rights().manager) {
    const kind = el("select", { id: "budget-kind" }, ["org", "team", "project", "key", "tag"].map((k) => el("option", { value: k, selected: k === "team" }, k)));
    const name = el("input", { id: "budget-name", required: true });
    const model = el("input", { id: "budget-model", placeholder: "all" });
    const period = el("select", { id: "budget-period" }, ["day", "week", "month"].map((p) => el("option", { value: p, selected: p === "month" }, p)));
    const max = el("input", { id: "budget-max", type: "number", min: 0, step: "any", required: true });
    const soft = el("input", { id: "budget-soft", type: "number", min: 0, step: "any", value: 0 });
    const msg = el("span");
    const form = el("form", { class: "inline card", id: "budget-form" },
      el("label", {}, "Kind", kind), el("label", {}, "Name", name), el("label", {}, "Model", model), el("label", {}, "Period", period),
      el("label", {}, "Limit (GPU-h)", max), el("label", {}, "Soft limit", soft), el("button", { type: "submit", id: "budget-save" }, "Set budget"), msg);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        await api("PUT", "/admin/budgets", { kind: kind.value, name: name.value, model: model.value, period: period.value, max_cost: Number(max.value), soft_limit: Number(soft.value) });
        await renderBudgets(view);
      } catch (e) { msg.replaceChildren(el("span", { class: "error", id: "budget-error" }, " " + e.message)); }
    });
    parts.push(form);
  }
  parts.push(budgetTable(l.data, "all"));
  if (state.tab === "budgets") view.replaceChildren(...parts); // not when another tab opened meanwhile
}

// ---- keys: create (the secret shown once), revoke

async function renderKeys(view) {
  const r = rights();
  const s = state.self;
  const l = await api("GET", "/admin/keys");
  let teams = (s.roles || []).filter((g) => g.team).map((g) => g.team);
  if (r.reader) {
    try { teams = teams.concat((await api("GET", "/admin/teams")).data.map((t) => t.name)); } catch (e) { /* not readable */ }
  }
  teams = [...new Set(teams)].sort();
  const canCreate = r.manager || (r.member && (!s.sso || s.self_service_keys));
  const parts = [el("h1", {}, "Keys")];
  const out = el("div", { id: "key-result" });
  if (canCreate) {
    const team = el("select", { id: "key-team", name: "team" }, teams.map((t) => el("option", { value: t }, t)));
    const name = el("input", { id: "key-name", name: "name", required: true, maxlength: 100 });
    const rpm = el("input", { id: "key-rpm", type: "number", min: 0, value: 0 });
    const tpm = el("input", { id: "key-tpm", type: "number", min: 0, value: 0 });
    const mif = el("input", { id: "key-inflight", type: "number", min: 0, value: 0 });
    const days = el("input", { id: "key-days", type: "number", min: 0, value: 0, title: "0: never" });
    const models = el("input", { id: "key-models", placeholder: "all", title: "comma-separated; empty: every model of the team" });
    const form = el("form", { class: "inline card", id: "key-form" },
      el("label", {}, "Team", team), el("label", {}, "Name", name),
      el("label", {}, "RPM", rpm), el("label", {}, "TPM", tpm), el("label", {}, "Max in flight", mif),
      el("label", {}, "Expires in days", days), el("label", {}, "Models", models),
      el("button", { type: "submit", id: "key-create" }, "Create key"));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        const req = { team: team.value, name: name.value, rpm: Number(rpm.value), tpm: Number(tpm.value), max_inflight: Number(mif.value) };
        if (Number(days.value) > 0) req.expires_at = new Date(Date.now() + Number(days.value) * 86400000).toISOString();
        const ms = models.value.split(",").map((m) => m.trim()).filter(Boolean);
        if (ms.length) req.models = ms;
        const k = await api("POST", "/admin/keys", req);
        out.replaceChildren(el("div", { class: "card" },
          el("p", {}, "Key " + k.id + " created. Copy its secret now: it is shown once and never again."),
          el("p", { class: "secret", id: "new-secret" }, k.key)));
        name.value = "";
        await refreshKeys(keysBox, out);
      } catch (e) { out.replaceChildren(el("p", { class: "error", id: "key-error" }, e.message)); }
    });
    parts.push(form);
    if (s.max_keys) parts.push(el("p", { class: "muted" }, "Members may own at most " + s.max_keys + " active keys."));
  } else if (r.member) {
    parts.push(el("p", { class: "muted" }, "Self-service keys are off on this gateway: ask a team admin for a key."));
  }
  const keysBox = el("div", { id: "keys" });
  parts.push(out, keysBox);
  view.replaceChildren(...parts);
  drawKeys(keysBox, l.data, out);
}

async function refreshKeys(box, out) {
  const keys = (await api("GET", "/admin/keys")).data;
  if (state.tab === "keys") drawKeys(box, keys, out); // not when another tab opened meanwhile
}

// drawKeys lists keys with their revoke and rotate buttons (each asks to
// be clicked twice); a rotation's new secret is shown once in out.
function drawKeys(box, keys, out) {
  if (!keys || keys.length === 0) { box.replaceChildren(el("p", { class: "muted" }, "No key.")); return; }
  const twice = (id, label, cls, action) => {
    const btn = el("button", { type: "button", class: "small " + cls, id }, label);
    btn.addEventListener("click", async () => {
      if (btn.dataset.armed !== "1") { btn.dataset.armed = "1"; btn.textContent = "Confirm " + label.toLowerCase(); return; }
      try { await action(); await refreshKeys(box, out); }
      catch (e) { btn.replaceWith(el("span", { class: "error" }, e.message)); }
    });
    return btn;
  };
  box.replaceChildren(el("table", { id: "keys-table" },
    el("tr", {}, ["ID", "Name", "Team", "Project", "Owner", "Hint", "RPM", "TPM", "In flight", "Models", "Expires", "Created", ""].map((h) => el("th", {}, h))),
    keys.map((k) => {
      const path = "/admin/keys/" + encodeURIComponent(k.id);
      const revoke = twice("revoke-" + k.id, "Revoke", "danger", () => api("DELETE", path));
      const rotate = twice("rotate-" + k.id, "Rotate", "", async () => {
        const r = await api("POST", path + "/rotate", { grace: "1h" });
        out.replaceChildren(el("div", { class: "card" },
          el("p", {}, "Key " + r.id + " rotated: the previous secret works until " + (r.previous_valid_until || "now") + ". Copy the new one now: it is shown once."),
          el("p", { class: "secret", id: "new-secret" }, r.key)));
      });
      const limits = el("button", { type: "button", class: "small", id: "limits-" + k.id }, "Limits");
      limits.addEventListener("click", () => editLimits(k, box, out));
      const actions = rights().manager ? [limits, " ", rotate, " ", revoke] : [rotate, " ", revoke];
      return el("tr", { id: "key-" + k.id },
        el("td", {}, k.id), el("td", {}, k.name), el("td", {}, k.team), el("td", {}, k.project || ""), el("td", {}, k.owner || ""),
        el("td", {}, k.hint), el("td", {}, k.rpm || "—"), el("td", {}, k.tpm || "—"), el("td", {}, k.max_inflight || "—"),
        el("td", {}, (k.models || []).join(", ") || "all"), el("td", {}, k.expires_at ? k.expires_at.slice(0, 10) : "never"),
        el("td", {}, (k.created_at || "").slice(0, 10)), el("td", {}, k.active ? actions : "inactive"));
    })));
}

// editLimits shows a form for a key's three limits (team admins and
// above: PUT /admin/keys/{id}/limits sets all three, 0 is unlimited).
function editLimits(k, box, out) {
  const input = (id, v) => el("input", { id, type: "number", min: 0, value: v || 0 });
  const rpm = input("limits-rpm", k.rpm), tpm = input("limits-tpm", k.tpm), mif = input("limits-inflight", k.max_inflight);
  const msg = el("span");
  const form = el("form", { class: "inline card", id: "limits-form" },
    el("strong", {}, "Limits of " + k.id + " (0: unlimited)"),
    el("label", {}, "RPM", rpm), el("label", {}, "TPM", tpm), el("label", {}, "Max in flight", mif),
    el("button", { type: "submit", id: "limits-save" }, "Save"), msg);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      await api("PUT", "/admin/keys/" + encodeURIComponent(k.id) + "/limits", { rpm: Number(rpm.value), tpm: Number(tpm.value), max_inflight: Number(mif.value) });
      out.replaceChildren(el("p", { class: "ok", id: "limits-saved" }, "Limits of " + k.id + " saved."));
      await refreshKeys(box, out);
    } catch (e) { msg.replaceChildren(el("span", { class: "error" }, " " + e.message)); }
  });
  out.replaceChildren(form);
}

// renderUsers lists users and their roles; managers grant a role (PUT
// /admin/users/{name}/roles: nobody grants above their own scope, the API
// refuses it) and remove one.
async function renderUsers(view) {
  const l = await api("GET", "/admin/users");
  const parts = [el("h1", {}, "Users and roles")];
  const manager = rights().manager;
  if (manager) {
    const user = el("input", { id: "grant-user", required: true, list: "grant-users" });
    const users = el("datalist", { id: "grant-users" }, l.data.map((u) => el("option", { value: u.name })));
    const role = el("select", { id: "grant-role" }, ["member", "viewer", "team_admin", "org_admin", "proxy_viewer", "proxy_admin"].map((r) => el("option", { value: r }, r)));
    const scope = el("input", { id: "grant-scope", placeholder: "team or organisation" });
    const msg = el("span");
    const form = el("form", { class: "inline card", id: "grant-form" },
      el("label", {}, "User", user, users), el("label", {}, "Role", role), el("label", {}, "On", scope),
      el("button", { type: "submit", id: "grant-save" }, "Grant"), msg);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const req = { role: role.value };
      if (["org_admin"].includes(role.value)) req.org = scope.value;
      else if (["member", "team_admin"].includes(role.value)) req.team = scope.value;
      else if (role.value === "viewer") {
        const teams = (await api("GET", "/admin/teams").catch(() => ({ data: [] }))).data.map((t) => t.name);
        if (teams.includes(scope.value)) req.team = scope.value; else req.org = scope.value;
      }
      try {
        await api("PUT", "/admin/users/" + encodeURIComponent(user.value) + "/roles", req);
        await renderUsers(view);
      } catch (e) { msg.replaceChildren(el("span", { class: "error", id: "grant-error" }, " " + e.message)); }
    });
    parts.push(form);
  }
  const roleCell = (u) => el("td", {}, (u.roles || []).map((g) => {
    const label = g.role + (g.team ? "@" + g.team : g.org ? "@" + g.org : "") + (g.source === "slurm" ? " (slurm)" : "");
    if (!manager) return label + " ";
    const rm = el("button", { type: "button", class: "small danger", title: "remove this role",
      id: "unrole-" + u.name + "-" + g.role + "-" + (g.team || g.org || "all") }, "×");
    rm.addEventListener("click", async () => {
      const q = new URLSearchParams({ role: g.role });
      if (g.team) q.set("team", g.team); else if (g.org) q.set("org", g.org);
      try { await api("DELETE", "/admin/users/" + encodeURIComponent(u.name) + "/roles?" + q); await renderUsers(view); }
      catch (e) { rm.replaceWith(el("span", { class: "error" }, e.message)); }
    });
    return el("span", { class: "role" }, label, " ", rm, " ");
  }));
  parts.push(el("table", { id: "users-table" },
    el("tr", {}, el("th", {}, "User"), el("th", {}, "Organisation"), el("th", {}, "Roles"), el("th", {}, "State")),
    l.data.map((u) => el("tr", { id: "user-" + u.name }, el("td", {}, u.name), el("td", {}, u.org || ""), roleCell(u),
      el("td", {}, u.disabled_at ? "disabled" : "active")))));
  if (state.tab === "users") view.replaceChildren(...parts); // not when another tab opened meanwhile
}

async function renderAudit(view) {
  const l = await api("GET", "/admin/audit?limit=100");
  view.replaceChildren(el("h1", {}, "Audit trail"), el("table", { id: "audit-table" },
    el("tr", {}, ["Time", "Actor", "Action", "Target", "Where", "Before", "After"].map((h) => el("th", {}, h))),
    l.data.map((a) => el("tr", {}, el("td", {}, a.time.replace("T", " ").slice(0, 19)), el("td", {}, a.actor), el("td", {}, a.action),
      el("td", {}, a.target), el("td", {}, [a.org, a.team].filter(Boolean).join("/")),
      el("td", {}, el("pre", {}, a.before ? JSON.stringify(a.before) : "")), el("td", {}, el("pre", {}, a.after ? JSON.stringify(a.after) : ""))))));
}

async function renderSyncs(view) {
  const l = await api("GET", "/admin/sync");
  view.replaceChildren(el("h1", {}, "Slurm syncs"), (l.data || []).length === 0 ? el("p", { class: "muted" }, "No Slurm import has run.") :
    el("table", { id: "syncs-table" },
      el("tr", {}, ["Started", "Source", "Outcome", "Created", "Shares", "Reparented", "Disabled", "Re-enabled", "Members", "Unchanged", "Error"].map((h) => el("th", {}, h))),
      l.data.map((s) => el("tr", {}, el("td", {}, s.started.replace("T", " ").slice(0, 19)), el("td", {}, s.source + (s.dry_run ? " (dry run)" : "")),
        el("td", {}, s.outcome), el("td", {}, s.created), el("td", {}, s.shares_changed), el("td", {}, s.reparented), el("td", {}, s.disabled),
        el("td", {}, s.reenabled), el("td", {}, s.members), el("td", {}, s.unchanged), el("td", {}, s.error || "")))));
}

start().catch((e) => showSignin(e.message));
