// The page of `tirastore dashboard` (python/tirastore/dashboard.py).
//
// It polls /api/overview every POLL_MS with the version it has, so the
// server sends only the programs changed since, and /api/program for the
// program shown when that one changed; both with the filter chosen (a
// project, a host, a user: the engine selects the records). Every text
// from the database goes into the page through textContent (never
// innerHTML): a program named "<script>" is shown as that text. Dates are
// shown in the browser's time zone, named in the header. Charts are
// uPlot's (vendored, see VENDORED.md).
"use strict";
(function () {
  const POLL_MS = 2000;
  const DIMS = ["project", "host", "user"];
  const state = {
    version: 0,
    programs: new Map(), // hash -> overview row
    selected: null, // the hash shown
    shownChanged: -1, // its "changed" when its view was read
    view: null, // the program view drawn (drawn again when the scale changes)
    charts: {}, // uPlot instances by name
    fleetDrawn: false,
    now: 0,
    filter: {}, // dimension -> the name chosen ("" is a name: no project)
    gen: 0, // bumped by a change of the filter: answers to an older one are dropped
    log: null, // the time axis's log scale: null, automatic; else the reader's choice
    timer: null,
  };
  // For the console and the browser tests: the charts drawn.
  window.tirastoreDashboard = { charts: state.charts };
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
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " days";
  }

  // -- dates -------------------------------------------------------------------
  // The database's dates are ISO 8601, with an offset, or without one (a
  // naive time, as some writers stored it: read as UTC, as the engine does).
  function parseDate(iso) {
    if (!iso) return NaN;
    let s = String(iso).trim().replace(" ", "T");
    if (!/([zZ]|[+-]\d\d:?\d\d)$/.test(s)) s += "Z";
    return Date.parse(s);
  }
  const pad = (n) => String(n).padStart(2, "0");
  // YYYY-MM-DD HH:MM[:SS] in the browser's time zone (uPlot's formatter,
  // as on the charts' axes).
  const DATE_S = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}"), DATE_M = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}");
  function showDate(ms, seconds) {
    return (seconds === false ? DATE_M : DATE_S)(new Date(ms));
  }
  // A table cell of a date: readable, the date as stored in its tooltip.
  function dateCell(iso) {
    const ms = parseDate(iso);
    const td = el("td", isFinite(ms) ? showDate(ms) : iso || "–", "date");
    if (iso) td.title = "as stored: " + iso;
    return td;
  }
  // Seconds since an ISO 8601 date, by the server's clock.
  function since(iso) {
    return state.now - parseDate(iso) / 1000;
  }
  function timeZone() {
    const off = -new Date().getTimezoneOffset();
    const name = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
    return name + " (UTC" + (off < 0 ? "−" : "+") + pad(Math.floor(Math.abs(off) / 60)) + ":" + pad(Math.abs(off) % 60) + ")";
  }
  // The time axis's ticks (uPlot's table: tick increment, format, then the
  // formats added when the year, month, day, hour, minute, second changes
  // between ticks; the first tick shows the year's): 24-hour times, ISO dates.
  const D = 86400, H = 3600, M = 60;
  const TIME_TICKS = [
    [365 * D, "{YYYY}", null, null, null, null, null, null, 1],
    [28 * D, "{MMM}", "\n{YYYY}", null, null, null, null, null, 1],
    [D, "{MMM} {D}", "\n{YYYY}", null, null, null, null, null, 1],
    [H, "{HH}:{mm}", "\n{YYYY}-{MM}-{DD}", null, "\n{YYYY}-{MM}-{DD}", null, null, null, 1],
    [M, "{HH}:{mm}", "\n{YYYY}-{MM}-{DD}", null, "\n{YYYY}-{MM}-{DD}", null, null, null, 1],
    [1, ":{ss}", "\n{YYYY}-{MM}-{DD} {HH}:{mm}", null, "\n{YYYY}-{MM}-{DD} {HH}:{mm}", null, "\n{HH}:{mm}", null, 1],
  ];

  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    return r.json();
  }

  // -- the filter ----------------------------------------------------------------
  function filterQuery() {
    return DIMS.filter((d) => d in state.filter).map((d) => "&" + d + "=" + encodeURIComponent(state.filter[d])).join("");
  }
  function filtered() {
    return DIMS.some((d) => d in state.filter);
  }
  // The filter is kept in the address's fragment (#project=...&host=...):
  // a reload shows the same records.
  function readFilter() {
    const q = new URLSearchParams(location.hash.slice(1));
    state.filter = {};
    for (const d of DIMS) if (q.has(d)) state.filter[d] = q.get(d);
  }
  function setFilter(dim, value) {
    if (value === null) delete state.filter[dim];
    else state.filter[dim] = value;
    const q = new URLSearchParams();
    for (const d of DIMS) if (d in state.filter) q.set(d, state.filter[d]);
    const hash = q.toString();
    history.replaceState(null, "", location.pathname + location.search + (hash ? "#" + hash : ""));
    restart();
  }
  // Read everything again, of the records the filter now selects.
  function restart() {
    state.gen++;
    state.version = 0;
    state.programs.clear();
    state.shownChanged = -1;
    state.fleetDrawn = false;
    clearTimeout(state.timer);
    poll();
  }
  function nameOf(dim, name) {
    return dim === "project" && name === "" ? "(none)" : name;
  }
  // The choices are rebuilt when the names change; their counts are
  // updated in place (an open list stays open while records come in).
  function renderFilters(o) {
    for (const dim of DIMS) {
      const select = $("filter-" + dim);
      const names = o.choices[dim].slice();
      // A name chosen that the database has no record of (yet): kept.
      if (dim in state.filter && !names.some((c) => c.name === state.filter[dim])) names.push({ name: state.filter[dim], records: 0 });
      const key = JSON.stringify(names.map((c) => c.name));
      if (select.dataset.names !== key) {
        select.dataset.names = key;
        const any = el("option", "any " + dim);
        any.value = "*";
        // "=" before a name: "" (no project) is a name, not "any".
        select.replaceChildren(any, ...names.map((c) => { const opt = el("option"); opt.value = "=" + c.name; return opt; }));
      }
      names.forEach((c, i) => { select.options[i + 1].textContent = nameOf(dim, c.name) + " (" + c.records.toLocaleString("en") + ")"; });
      select.value = dim in state.filter ? "=" + state.filter[dim] : "*";
    }
    $("filter-clear").disabled = !filtered();
    $("filter-matched").textContent = filtered()
      ? o.matched.toLocaleString("en") + " of " + o.records.toLocaleString("en") + " records selected"
      : "all " + o.records.toLocaleString("en") + " records";
  }

  // -- polling -------------------------------------------------------------------
  async function poll() {
    const gen = state.gen;
    try {
      let o = await getJSON("/api/overview?since=" + state.version + filterQuery());
      if (gen !== state.gen) return; // the filter changed: the poll of the new one runs
      if (o.version < state.version) { // the server started over: read everything again
        state.version = 0;
        state.programs.clear();
        o = await getJSON("/api/overview?since=0" + filterQuery());
        if (gen !== state.gen) return;
      }
      await apply(o, gen);
      if (gen !== state.gen) return;
      const when = new Date().toLocaleTimeString("en-GB");
      $("status").textContent = o.caught_up
        ? "live · updated " + when
        : "reading the database… " + o.records.toLocaleString("en") + " records so far";
      $("status").className = o.error ? "bad" : "muted";
      if (o.error) $("status").textContent = "refresh failed: " + o.error;
    } catch (e) {
      if (gen !== state.gen) return;
      $("status").textContent = "cannot reach the dashboard's server: " + e.message;
      $("status").className = "bad";
    }
    state.timer = setTimeout(poll, POLL_MS);
  }

  async function apply(o, gen) {
    state.now = o.now;
    const changed = o.version !== state.version || !state.fleetDrawn;
    for (const p of o.programs) state.programs.set(p.program_hash, p);
    state.version = o.version;
    renderFilters(o);
    renderHealth(o);
    renderClaims(o.claims);
    if (changed) {
      renderPrograms(o);
      renderFleet(o.fleet);
    }
    if (state.selected !== null && !state.programs.has(state.selected)) state.selected = null;
    if (state.selected === null && state.programs.size) {
      let best = null;
      for (const p of state.programs.values()) if (!best || p.records > best.records) best = p;
      state.selected = best.program_hash;
      markSelected();
    }
    if (state.selected === null) clearProgram();
    const sel = state.programs.get(state.selected);
    if (sel && sel.changed !== state.shownChanged) await loadProgram(sel.program_hash, gen);
  }

  function renderHealth(o) {
    const h = o.health || {};
    $("db").textContent = h.db_path || "";
    const items = [["database", h.db_path]];
    if (h.size !== undefined) items.push(["size", bytes(h.size)]);
    items.push(["records", o.records.toLocaleString("en") + " (" + o.legal.toLocaleString("en") + " legal, " +
      o.illegal.toLocaleString("en") + " illegal)"]);
    items.push(["programs", o.program_count.toLocaleString("en") + (filtered() ? " with records selected" : "")]);
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
      const at = parseDate(c.date);
      items.push(["last check", (isFinite(at) ? showDate(at, false) + " (" + duration(since(c.date)) + " ago)" : c.date) +
        " by " + c.username + "@" + c.hostname + ": " + (c.ok ? "ok" : c.problems + " problem(s)") +
        (c.repaired ? ", " + c.repaired + " repaired" : ""), c.ok ? "good" : "bad"]);
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
        dateCell(p.last_record)]);
      tr.className = "prog";
      tr.dataset.hash = p.program_hash;
      tr.addEventListener("click", () => {
        state.selected = p.program_hash;
        markSelected();
        loadProgram(p.program_hash, state.gen);
      });
      return tr;
    });
    if (!rows.length) rows.push(row([el("td", filtered() ? "no records selected" : "no records yet", "muted")]));
    fill($("programs").tBodies[0], rows);
    markSelected();
  }

  function chart(key, container, opts, data) {
    const old = state.charts[key];
    if (old) old.destroy();
    opts.width = Math.max(container.clientWidth - 4, 200);
    state.charts[key] = new uPlot(opts, data, container);
  }
  function dropChart(key) {
    if (state.charts[key]) state.charts[key].destroy();
    delete state.charts[key];
  }

  function clearProgram() {
    state.view = null;
    $("program-name").textContent = "";
    $("program-hash").textContent = "";
    $("program-summary").textContent = filtered() ? "no records selected" : "no records yet";
    dropChart("program");
    $("program-chart").replaceChildren();
    fill($("spread").tBodies[0], []);
  }

  async function loadProgram(hash, gen) {
    const v = await getJSON("/api/program?hash=" + encodeURIComponent(hash) + filterQuery());
    if (!v || hash !== state.selected || gen !== state.gen) return;
    state.shownChanged = v.changed;
    state.view = v;
    $("program-name").textContent = v.program_name;
    $("program-hash").textContent = v.program_hash.slice(0, 12);
    $("program-summary").textContent = v.records.toLocaleString("en") + " records" + (filtered() ? " selected" : "") +
      ": " + v.legal.toLocaleString("en") + " legal, " + v.illegal.toLocaleString("en") + " illegal" +
      (v.untimed ? ", " + v.untimed + " untimed" : "") + "; best " + secs(v.best) + " s" +
      (v.bucket_width > 1 ? "; each pair of points is the fastest and slowest of " + v.bucket_width +
      " consecutive records" : "");
    drawProgram(v);
    renderSpread(v.top);
  }

  // The program's chart: its records' times over their positions, and the
  // best so far. The time axis is logarithmic when the times span more
  // than LOG_RATIO (automatic), or as the reader chose.
  const LOG_RATIO = 20;
  function drawProgram(v) {
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
    const canLog = pos.length > 0 && pos.length === v.scatter.y.length;
    const auto = canLog && Math.max(...pos) / Math.min(...pos) > LOG_RATIO;
    const log = canLog && (state.log === null ? auto : state.log);
    const box = $("log-scale");
    box.checked = log;
    box.disabled = !canLog;
    box.parentElement.title = canLog ? "a logarithmic time axis (automatic when the times span more than " +
      LOG_RATIO + "x)" : "a time of 0 cannot be drawn on a logarithmic axis";
    chart("program", $("program-chart"), {
      height: 300,
      scales: { x: { time: false }, y: log ? { distr: 3, log: 10 } : {} },
      axes: [{ label: "record (in insertion order)" }, { label: "time (s)" + (log ? ", log scale" : ""), size: 60 }],
      series: [{ label: "record" },
        { label: "median time", stroke: "#7a8aa6", paths: () => null, points: { show: true, size: 4, fill: "#7a8aa6" } },
        { label: "best so far", stroke: "#d0342c", width: 2, paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } }],
    }, [xs, ys, best]);
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
      const dev = num((100 * s.spread).toFixed(1) + "%" + (s.stable ? "" : " unstable"), s.stable ? "" : "unstable");
      return row([num(i + 1), el("td", s.schedule, "mono"), num(secs(s.time)), num(s.mad === null || s.mad === undefined ? "–" : Number(s.mad).toPrecision(2)), num(s.count),
        num(secs(s.min)), num(secs(s.max)), cell, dev, el("td", s.hostname), dateCell(s.creation_date)]);
    });
    fill($("spread").tBodies[0], rows);
  }

  const PALETTE = ["#2a6fdb", "#d0342c", "#1e7b34", "#b26b00", "#7b3fb3", "#00838f", "#c2185b", "#5d6b7a", "#9e9e9e"];

  // The throughput: each bin of s.step seconds drawn as a step from its
  // start to its end, from zero and back, on a time axis around the data
  // (at least ten bins wide).
  function renderFleet(fleet) {
    for (const dim of ["host", "user", "project"]) {
      const s = fleet[dim];
      const box = $("fleet-" + dim);
      if (!s.names.length) {
        dropChart("fleet-" + dim);
        box.replaceChildren(el("p", filtered() ? "no dated records selected" : "no dated records", "muted"));
        continue;
      }
      const n = s.counts[0].length, perMin = s.step / 60;
      const xs = [s.start - s.step];
      for (let i = 0; i <= n; i++) xs.push(s.start + i * s.step);
      const data = [xs, ...s.counts.map((c) => [0, ...c.map((k) => k / perMin), 0])];
      let lo = s.start - s.step, hi = s.start + (n + 1) * s.step;
      const wide = 10 * s.step;
      if (hi - lo < wide) { const mid = (lo + hi) / 2; lo = mid - wide / 2; hi = mid + wide / 2; }
      chart("fleet-" + dim, box, {
        height: 170,
        scales: { x: { time: true, range: () => [lo, hi] }, y: { range: (u, min, max) => [0, Math.max(max, 1) * 1.08] } },
        axes: [{ values: TIME_TICKS, space: 60 }, { size: 44 }],
        series: [{ label: "time", value: (u, x) => (x === null || x === undefined ? "–" : showDate(x * 1000, false) +
            " (+" + duration(s.step) + ")") },
          ...s.names.map((name, i) => ({ label: nameOf(dim, name), stroke: PALETTE[i % PALETTE.length], width: 1.5,
            paths: uPlot.paths.stepped({ align: 1 }), points: { show: false },
            value: (u, y) => (y === null || y === undefined ? "–" : y.toPrecision(3) + "/min") }))],
      }, data);
    }
    state.fleetDrawn = true;
  }

  function renderClaims(claims) {
    $("claim-count").textContent = "(" + claims.length + ")";
    const rows = claims.map((c) => {
      const renewed = since(c.renewed_at);
      const overdue = renewed > c.lease;
      const ended = c.job_ended;
      const holder = c.dead ? "dead (taken over by the next caller)" : ended ? "its job ended (taken over by the next caller)" :
        overdue ? "overdue: no renewal within its lease" : "alive?";
      const job = c.slurm_job_id ? c.slurm_job_id + (c.job_state ? " " + c.job_state : "") : "–";
      const age = num(duration(since(c.claimed_at)));
      age.title = "claimed " + showDate(parseDate(c.claimed_at));
      const ren = num(duration(renewed) + " ago");
      ren.title = "renewed " + showDate(parseDate(c.renewed_at));
      return row([el("td", c.program_name, "mono"), el("td", c.tiralib_schedule_string, "mono"), el("td", c.hostname),
        num(c.pid), el("td", job, ended || c.job_state === "SUSPENDED" ? "bad" : ""), el("td", c.username), age, ren,
        num(duration(c.lease)), el("td", holder, c.dead || ended || overdue ? "bad" : "")]);
    });
    if (!rows.length) rows.push(row([el("td", "nobody is measuring", "muted")]));
    fill($("claims").tBodies[0], rows);
  }

  function setup() {
    $("tz").textContent = "times in " + timeZone();
    readFilter();
    for (const dim of DIMS) {
      $("filter-" + dim).addEventListener("change", (e) => {
        const v = e.target.value;
        setFilter(dim, v === "*" ? null : v.slice(1));
      });
    }
    $("filter-clear").addEventListener("click", () => {
      state.filter = {};
      setFilter("project", null);
    });
    $("log-scale").addEventListener("change", (e) => {
      state.log = e.target.checked;
      if (state.view) drawProgram(state.view);
    });
    window.addEventListener("hashchange", () => { readFilter(); restart(); });
    poll();
  }

  setup();
})();
