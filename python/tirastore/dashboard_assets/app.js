// The page of `tirastore dashboard` (python/tirastore/dashboard.py).
//
// It polls /api/overview every POLL_MS with the version it has, so the
// server sends only the programs changed since, and /api/program for the
// program shown when that one changed. Every text from the database goes
// into the page through textContent (never innerHTML): a program named
// "<script>" is shown as that text. Charts are uPlot's (vendored, see
// VENDORED.md).
"use strict";
(function () {
  const POLL_MS = 2000;
  const state = {
    version: 0,
    programs: new Map(), // hash -> overview row
    selected: null, // the hash shown
    shownChanged: -1, // its "changed" when its view was read
    charts: {},
    now: 0,
  };
  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function row(cells) {
    const tr = document.createElement("tr");
    for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
    return tr;
  }
  function num(x, cls) {
    return el("td", typeof x === "number" ? x.toLocaleString("en") : x, "num" + (cls ? " " + cls : ""));
  }
  function secs(x) {
    return x === null || x === undefined ? "–" : Number(x).toPrecision(4);
  }
  function bytes(n) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + u[i];
  }
  function duration(s) {
    if (!isFinite(s)) return "?";
    if (s < 120) return Math.round(s) + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  // Seconds since an ISO 8601 date (UTC without an offset), by the server's clock.
  function since(iso) {
    if (!iso) return NaN;
    let s = iso.replace(" ", "T");
    if (!/[zZ]|[+-]\d\d:\d\d$/.test(s)) s += "Z";
    return state.now - Date.parse(s) / 1000;
  }
  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    return r.json();
  }

  async function poll() {
    try {
      let o = await getJSON("/api/overview?since=" + state.version);
      if (o.version < state.version) { // the server started over: read everything again
        state.version = 0;
        state.programs.clear();
        o = await getJSON("/api/overview?since=0");
      }
      await apply(o);
      const when = new Date().toLocaleTimeString("en-GB");
      $("status").textContent = o.caught_up
        ? "live · updated " + when
        : "reading the database… " + o.records.toLocaleString("en") + " records so far";
      $("status").className = o.error ? "bad" : "muted";
      if (o.error) $("status").textContent = "refresh failed: " + o.error;
    } catch (e) {
      $("status").textContent = "cannot reach the dashboard's server: " + e.message;
      $("status").className = "bad";
    }
    setTimeout(poll, POLL_MS);
  }

  async function apply(o) {
    state.now = o.now;
    const changed = o.version !== state.version || !state.charts.fleet;
    for (const p of o.programs) state.programs.set(p.program_hash, p);
    state.version = o.version;
    renderHealth(o);
    renderClaims(o.claims);
    if (changed) {
      renderPrograms(o);
      renderFleet(o.fleet);
    }
    if (state.selected === null && state.programs.size) {
      let best = null;
      for (const p of state.programs.values()) if (!best || p.records > best.records) best = p;
      state.selected = best.program_hash;
      markSelected();
    }
    const sel = state.programs.get(state.selected);
    if (sel && sel.changed !== state.shownChanged) await loadProgram(sel.program_hash);
  }

  function renderHealth(o) {
    const h = o.health || {};
    $("db").textContent = h.db_path || "";
    const items = [["database", h.db_path]];
    if (h.size !== undefined) items.push(["size", bytes(h.size)]);
    items.push(["records", o.records.toLocaleString("en") + " (" + o.legal.toLocaleString("en") + " legal, " +
      o.illegal.toLocaleString("en") + " illegal)"]);
    items.push(["programs", o.program_count.toLocaleString("en")]);
    let lock = ["lock", "none: a PostgreSQL server", ""];
    if (h.lock) {
      const l = h.lock;
      if (!l.held) lock = ["lock", "free", "good"];
      else if (!l.holder) lock = ["lock", "held, but not a lock record (" + l.unreadable + ")", "bad"];
      else {
        const hd = l.holder;
        const alive = hd.on_this_host ? (hd.alive ? "alive" : "dead") : "on another host";
        lock = ["lock", "held by " + hd.hostname + " pid " + hd.pid + ", " + duration(hd.age_seconds) + " old, " + alive +
          (l.abandoned ? ": abandoned (tirastore check --repair)" : ""), l.abandoned ? "bad" : ""];
      }
    }
    items.push(lock);
    const c = h.last_check;
    if (!c) items.push(["last check", "none recorded (tirastore check DB records one)", "muted"]);
    else {
      items.push(["last check", duration(since(c.date)) + " ago by " + c.username + "@" + c.hostname + ": " +
        (c.ok ? "ok" : c.problems + " problem(s)") + (c.repaired ? ", " + c.repaired + " repaired" : ""), c.ok ? "good" : "bad"]);
      for (const p of c.first_problems) items.push(["", p, "bad"]);
    }
    if (o.error) items.push(["refresh", o.error, "bad"]);
    const dl = $("health");
    const nodes = [];
    for (const [k, v, cls] of items) {
      nodes.push(el("dt", k));
      nodes.push(el("dd", v, cls));
    }
    dl.replaceChildren(...nodes);
  }

  function markSelected() {
    for (const tr of $("programs").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.hash === state.selected);
  }

  function renderPrograms(o) {
    $("program-count").textContent = "(" + state.programs.size.toLocaleString("en") + ")";
    const progs = [...state.programs.values()].sort((a, b) =>
      a.program_name < b.program_name ? -1 : a.program_name > b.program_name ? 1 :
      a.program_hash < b.program_hash ? -1 : 1);
    const rows = progs.map((p) => {
      const tr = row([el("td", p.program_name, "mono name"), el("td", p.program_hash.slice(0, 8), "mono"),
        num(p.records), num(p.legal), num(p.illegal), num(secs(p.best)), el("td", p.best_schedule || "–", "mono"),
        el("td", p.last_record || "–")]);
      tr.className = "prog";
      tr.dataset.hash = p.program_hash;
      tr.addEventListener("click", () => {
        state.selected = p.program_hash;
        markSelected();
        loadProgram(p.program_hash);
      });
      return tr;
    });
    fill($("programs").tBodies[0], rows);
    markSelected();
  }

  function chart(key, container, opts, data) {
    const old = state.charts[key];
    if (old) old.destroy();
    opts.width = Math.max(container.clientWidth - 4, 200);
    state.charts[key] = new uPlot(opts, data, container);
  }

  async function loadProgram(hash) {
    const v = await getJSON("/api/program?hash=" + encodeURIComponent(hash));
    if (!v || hash !== state.selected) return;
    state.shownChanged = v.changed;
    $("program-name").textContent = v.program_name;
    $("program-hash").textContent = v.program_hash.slice(0, 12);
    $("program-summary").textContent = v.records.toLocaleString("en") + " records: " + v.legal.toLocaleString("en") +
      " legal, " + v.illegal.toLocaleString("en") + " illegal" + (v.untimed ? ", " + v.untimed + " untimed" : "") +
      "; best " + secs(v.best) + " s" + (v.bucket_width > 1 ? "; each pair of points is the fastest and slowest of " +
      v.bucket_width + " consecutive records" : "");
    // One x axis for both series: the scatter's points and the steps,
    // the best-so-far value carried forward to every x.
    const xs = [...new Set(v.scatter.x.concat(v.steps.x))].sort((a, b) => a - b);
    const sy = new Map(v.scatter.x.map((x, i) => [x, v.scatter.y[i]]));
    const ys = [], best = [];
    let j = -1;
    for (const x of xs) {
      while (j + 1 < v.steps.x.length && v.steps.x[j + 1] <= x) j++;
      ys.push(sy.has(x) ? sy.get(x) : null);
      best.push(j >= 0 ? v.steps.y[j] : null);
    }
    const pos = v.scatter.y.filter((y) => y > 0);
    const log = pos.length === v.scatter.y.length && pos.length > 0 && Math.max(...pos) / Math.min(...pos) > 100;
    chart("program", $("program-chart"), {
      height: 300,
      scales: { x: { time: false }, y: log ? { distr: 3 } : {} },
      axes: [{ label: "record (in insertion order)" }, { label: "time (s)" }],
      series: [{ label: "record" },
        { label: "median time", stroke: "#7a8aa6", paths: () => null, points: { show: true, size: 4, fill: "#7a8aa6" } },
        { label: "best so far", stroke: "#d0342c", width: 2, paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } }],
    }, [xs, ys, best]);
    renderSpread(v.top);
  }

  function renderSpread(top) {
    let lo = Infinity, hi = -Infinity;
    for (const s of top) { lo = Math.min(lo, s.min); hi = Math.max(hi, s.max); }
    const scale = (x) => (hi > lo ? (100 * (x - lo)) / (hi - lo) : 50);
    const rows = top.map((s, i) => {
      const bar = el("div", null, "bar");
      const range = el("span");
      range.style.left = scale(s.min) + "%";
      range.style.width = Math.max(scale(s.max) - scale(s.min), 1) + "%";
      const med = el("span", null, "median");
      med.style.left = scale(s.time) + "%";
      bar.append(range, med);
      const cell = el("td");
      cell.appendChild(bar);
      cell.title = "q1 " + secs(s.q1) + " s, q3 " + secs(s.q3) + " s";
      return row([num(i + 1), el("td", s.schedule, "mono"), num(secs(s.time)), num(s.runs), num(secs(s.min)),
        num(secs(s.max)), cell, el("td", s.hostname)]);
    });
    fill($("spread").tBodies[0], rows);
  }

  const PALETTE = ["#2a6fdb", "#d0342c", "#1e7b34", "#b26b00", "#7b3fb3", "#00838f", "#c2185b", "#5d6b7a", "#9e9e9e"];

  function renderFleet(fleet) {
    for (const dim of ["host", "user", "project"]) {
      const s = fleet[dim];
      const box = $("fleet-" + dim);
      if (!s.names.length) { box.replaceChildren(el("p", "no dated records", "muted")); continue; }
      const n = s.counts[0].length, perMin = s.step / 60;
      const xs = Array.from({ length: n }, (_, i) => s.start + i * s.step);
      const data = [xs, ...s.counts.map((c) => c.map((k) => k / perMin))];
      chart("fleet-" + dim, box, {
        height: 160,
        axes: [{}, { size: 40 }],
        series: [{}, ...s.names.map((name, i) => ({ label: dim === "project" && name === "" ? "(none)" : name,
          stroke: PALETTE[i % PALETTE.length], width: 1.5, points: { show: n < 3 } }))],
      }, data);
      state.charts.fleet = true;
    }
  }

  function renderClaims(claims) {
    $("claim-count").textContent = "(" + claims.length + ")";
    const rows = claims.map((c) => {
      const renewed = since(c.renewed_at);
      const overdue = renewed > c.lease;
      const holder = c.dead ? "dead (taken over by the next caller)" : overdue ? "overdue: no renewal within its lease" : "alive?";
      return row([el("td", c.program_name, "mono"), el("td", c.tiralib_schedule_string, "mono"), el("td", c.hostname),
        num(c.pid), el("td", c.slurm_job_id || "–"), el("td", c.username), num(duration(since(c.claimed_at))),
        num(duration(renewed) + " ago"), num(duration(c.lease)), el("td", holder, c.dead || overdue ? "bad" : "")]);
    });
    if (!rows.length) rows.push(row([el("td", "nobody is measuring", "muted")]));
    fill($("claims").tBodies[0], rows);
  }

  poll();
})();
