/* The run page: renders the run data embedded in #run-data (run.html), or, as an MCP App
   view, the run of the tool result the host hands it (ui/initialize, then
   ui/notifications/tool-result; the run itself is read through the host with resources/read).
   Every text from the run goes in through textContent, never as markup. No request leaves
   the page but the postMessage calls to the host of the MCP App. */
(function () {
  "use strict";

  var WORST_FIRST = ["crash", "numerical_mismatch", "unsupported", "missing", "passed"];
  var FAILING = { crash: true, numerical_mismatch: true };
  var PAGE_SIZE = 100;
  var state = { data: null, sortKey: "id", sortDir: 1, page: 0, rows: [], open: null, cell: null };

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs) {
    var node = document.createElement(tag);
    var key;
    for (key in attrs || {}) {
      if (key === "text") node.textContent = attrs[key];
      else if (key === "cls") node.className = attrs[key];
      else node.setAttribute(key, attrs[key]);
    }
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  function worst(counts) {
    for (var i = 0; i < WORST_FIRST.length; i++) if (counts[WORST_FIRST[i]]) return WORST_FIRST[i];
    return "missing";
  }

  var COLLATOR = new Intl.Collator(undefined, { numeric: true });  // one collator: localeCompare makes one per call
  function natural(a, b) { return COLLATOR.compare(String(a), String(b)); }

  function badge(status) { return el("span", { cls: "status st-" + status, text: status }); }

  // ---- header -------------------------------------------------------------------------------
  function renderHeader(d) {
    var h = d.header;
    document.title = "opdebug: " + h.title;
    $("title").textContent = h.title;
    var verdict = $("verdict");
    verdict.textContent = h.verdict;
    verdict.className = "verdict v-" + h.verdict;
    $("summary").textContent = h.summary;
    var counts = clear($("counts"));
    Object.keys(h.counts).forEach(function (status) {
      var chip = el("button", { type: "button", cls: "chip st-" + status, "data-status": status },
        status + " " + h.counts[status]);
      chip.addEventListener("click", function () { setFilter("filter-status", status); });
      counts.appendChild(chip);
    });
    counts.appendChild(el("span", { cls: "planned", text: "planned " + h.planned + ", recorded " + h.recorded }));
    var facts = clear($("facts"));
    [["operator", h.operator], ["candidate", h.candidate], ["reference", h.reference], ["judge", h.judge],
     ["tolerance", h.tolerance], ["after the fix", h.verify], ["integration", h.integration_hint],
     ["evidence", h.evidence], ["analyzed at", h.analyzed_at]].forEach(function (kv) {
      if (!kv[1]) return;
      facts.appendChild(el("dt", { text: kv[0] }));
      facts.appendChild(el("dd", { text: kv[1] }));
    });
    var links = clear($("links"));
    (d.links || []).forEach(function (l) {
      links.appendChild(document.body.classList.contains("app")
        ? el("code", { title: "in the run directory", text: l.href })
        : el("a", { href: l.href, text: l.label }));
    });
  }

  // ---- findings -----------------------------------------------------------------------------
  function caseLink(id) {
    var a = el("a", { href: "#case=" + encodeURIComponent(id), cls: "case-link", text: id });
    a.addEventListener("click", function (e) { e.preventDefault(); openCase(id); });
    return a;
  }

  function linkList(ids) {
    var span = el("span");
    ids.forEach(function (id, i) { if (i) span.appendChild(document.createTextNode(", ")); span.appendChild(caseLink(id)); });
    return span;
  }

  function findingCard(f) {
    var card = el("article", { cls: "finding" + (f.exact ? " exact" : ""), "data-predicate": f.predicate });
    card.appendChild(el("h3", null, f.label ? el("span", { cls: "label", text: f.label + ": " }) : null,
      el("code", { text: f.predicate }), " ",
      el("span", { cls: f.exact ? "exact-tag" : "not-exact-tag", text: f.exact ? "exact" : "not exact" })));
    var dl = el("dl", { cls: "facts" });
    function row(k, v) { if (v === null || v === undefined || v === "" || (v.length === 0)) return; dl.appendChild(el("dt", { text: k })); dl.appendChild(typeof v === "string" ? el("dd", { text: v }) : el("dd", null, v)); }
    row("statement", f.statement);
    row("boundary", f.boundary);
    row("minimal pair", f.pair_cases.length ? el("span", null, linkList(f.pair_cases), " - " + f.pair) : f.pair);
    f.terms.forEach(function (t) { row("term", t); });
    row("says the same as", f.equivalent.join(", "));
    if (f.validation) {
      var v = f.validation;
      row("validation", v.text + (v.probes_run ? " (probes predicted " + v.probes_held + " of " + v.probes_run + " run)" : ""));
      if (v.probe_ids.length) row("probes", linkList(v.probe_ids));
      v.held.forEach(function (t) { row("held", t); });
      v.open.forEach(function (t) { row("still to run", t); });
      v.reads.forEach(function (t) { row("reads", t); });
    }
    if (f.necessary_only) row("necessary only", "cases equal but for the seed disagree: the values decide too");
    f.why_not_exact.forEach(function (t) { row("not exact", t); });
    f.counterexamples.forEach(function (c) {
      row("counterexample", el("span", null, caseLink(c.case_id), " " + c.observed + "s where " + c.refutes +
        " predicted it " + c.predicted + "s" + (c.probe ? " (probe: " + c.probe + ")" : "")));
    });
    if (f.cases.length) row("covers", linkList(f.cases));
    card.appendChild(dl);
    return card;
  }

  function renderFindings(d) {
    var box = clear($("findings"));
    if (!d.findings.length) box.appendChild(el("p", { cls: "none", text: "No finding." }));
    d.findings.forEach(function (f) { box.appendChild(findingCard(f)); });
    var comp = clear($("competing"));
    if (d.competing.length) {
      comp.appendChild(el("h3", { text: "Competing hypotheses (" + d.competing.length + ")" }));
      var ul = el("ul");
      d.competing.forEach(function (c) {
        ul.appendChild(el("li", { cls: "competing" }, el("code", { text: c.predicate }),
          (c.boundary ? " - " + c.boundary : "") + " - " + c.pair));
      });
      comp.appendChild(ul);
    }
    renderAccounting(d.accounting || {});
  }

  function renderAccounting(a) {
    var box = clear($("accounting"));
    function block(title, cls, items, make) {
      if (!items || !items.length) return;
      var sec = el("div", { cls: "account " + cls });
      sec.appendChild(el("h3", { text: title }));
      var ul = el("ul");
      items.forEach(function (item) { ul.appendChild(el("li", null, make(item))); });
      sec.appendChild(ul);
      box.appendChild(sec);
    }
    block("What the analysis says", "lines", a.lines, function (t) { return t; });
    block("Several causes", "causes", a.causes > 1 ? [a.causes + " separate causes, each finding above covering its own failing cases"] : [], function (t) { return t; });
    block("Failing cases no finding covers", "unexplained", a.unexplained, function (g) {
      return el("span", null, g.count + " " + (g.status || "failing") + " case(s): ", linkList(g.cases),
        g.survivors.length ? " - closest: " + g.survivors.join("; ") : "");
    });
    block("Refuted leads", "refuted", a.refuted, function (r) {
      return el("span", null, el("code", { text: r.predicate }), (r.was_exact ? " (was exact)" : "") + " - contradicted by ",
        linkList(r.refuted_by));
    });
    block("Counterexamples", "counterexamples", a.counterexamples, function (c) {
      return el("span", null, caseLink(c.case_id), " " + c.observed + "s where " + c.refutes + " predicted it " + c.predicted + "s" +
        (c.probe ? " (probe: " + c.probe + ")" : ""));
    });
    block("Crash groups", "crash-groups", Object.keys(a.crash_groups || {}), function (sig) {
      return el("span", null, el("code", { text: sig }), ": ", linkList(a.crash_groups[sig]));
    });
    block("Unsupported (not a failure: the operator refuses the combination)", "unsupported", a.unsupported && a.unsupported.length ? [a.unsupported] : [], linkList);
    block("Cases identical but for the seed that disagree", "identical", a.identical, function (p) {
      return el("span", null, caseLink(p.failing), " fails, ", caseLink(p.passing), " passes");
    });
    block("Missing evidence", "missing", a.missing && a.missing.length ? [a.missing] : [], linkList);
    block("Next cases", "next", a.next_cases, function (n) { return (n.kind ? "[" + n.kind + "] " : "") + n.base + ": " + n.reason; });
    if (a.consistency) block("Consistency", "consistency", [a.consistency], function (t) { return t; });
  }

  // ---- the grid -----------------------------------------------------------------------------
  function onlyFailing(d) {
    // per axis: the values every case that has them fails with (and some other case of the run does not fail)
    var out = d.axes.map(function () { return {}; });
    d.axes.forEach(function (_a, i) {
      var seen = {};
      d.cases.forEach(function (c) {
        var v = c.v[i];
        seen[v] = (seen[v] === undefined ? true : seen[v]) && !!FAILING[c.status];
      });
      Object.keys(seen).forEach(function (v) { if (seen[v] && Object.keys(seen).length > 1) out[i][v] = true; });
    });
    return out;
  }

  function axisValues(d, i) {
    var seen = {};
    d.cases.forEach(function (c) { seen[c.v[i]] = true; });
    return Object.keys(seen).sort(natural);
  }

  function fillAxisSelect(select, axes, chosen) {
    clear(select);
    axes.forEach(function (a, i) { select.appendChild(el("option", { value: String(i), text: a })); });
    select.value = String(chosen);
  }

  function renderGrid() {
    var d = state.data;
    var r = +$("grid-rows").value, c = +$("grid-cols").value;
    var box = clear($("grid"));
    if (!d.axes.length || !d.cases.length) { box.appendChild(el("p", { cls: "none", text: "No cases." })); return; }
    var rows = axisValues(d, r), cols = axisValues(d, c), marks = onlyFailing(d);
    var cells = {};
    d.cases.forEach(function (cs) {
      var key = cs.v[r] + "\u0000" + cs.v[c];
      var cell = cells[key] || (cells[key] = {});
      cell[cs.status] = (cell[cs.status] || 0) + 1;
    });
    function head(tag, axis, value) {
      var th = el(tag, { text: value });
      if (marks[axis][value]) { th.className = "only-failing"; th.title = d.axes[axis] + "=" + value + ": only failing cases have it"; }
      return th;
    }
    var table = el("table", { cls: "grid", "data-rows": d.axes[r], "data-cols": d.axes[c] });
    var tr = el("tr", null, el("th", { cls: "corner", text: d.axes[r] + " \u2193 / " + d.axes[c] + " \u2192" }));
    cols.forEach(function (v) { tr.appendChild(head("th", c, v)); });
    table.appendChild(el("thead", null, tr));
    var body = el("tbody");
    rows.forEach(function (rv) {
      var line = el("tr", null, head("th", r, rv));
      cols.forEach(function (cv) {
        var counts = cells[rv + "\u0000" + cv];
        if (!counts) { line.appendChild(el("td", { cls: "empty", text: "" })); return; }
        var status = worst(counts);
        var total = 0;
        var parts = WORST_FIRST.filter(function (s) { return counts[s]; }).map(function (s) { total += counts[s]; return counts[s] + " " + s; });
        var td = el("td", { cls: "cell st-" + status, "data-status": status, "data-row": rv, "data-col": cv,
          title: d.axes[r] + "=" + rv + ", " + d.axes[c] + "=" + cv + ": " + parts.join(", ") }, el("b", { text: String(total) }), el("small", { text: parts.join(", ") }));
        td.addEventListener("click", function () {
          state.cell = [[r, rv], [c, cv]];
          applyFilters();
          $("cases-section").scrollIntoView();
        });
        line.appendChild(td);
      });
      body.appendChild(line);
    });
    table.appendChild(body);
    box.appendChild(table);
  }

  // ---- the table ----------------------------------------------------------------------------
  function setFilter(id, value) { $(id).value = value; if (id === "filter-axis") fillValues(); applyFilters(); $("cases-section").scrollIntoView(); }

  function fillValues() {
    var select = clear($("filter-value"));
    select.appendChild(el("option", { value: "", text: "any" }));
    var axis = $("filter-axis").value;
    if (axis === "") return;
    axisValues(state.data, +axis).forEach(function (v) { select.appendChild(el("option", { value: v, text: v })); });
  }

  function applyFilters() {
    var d = state.data;
    var status = $("filter-status").value, axis = $("filter-axis").value, value = $("filter-value").value;
    var text = $("filter-text").value.trim().toLowerCase();
    state.rows = d.cases.filter(function (c) {
      if (status && c.status !== status) return false;
      if (axis !== "" && value !== "" && c.v[+axis] !== value) return false;
      if (state.cell && !state.cell.every(function (p) { return c.v[p[0]] === p[1]; })) return false;
      if (text && (c.id + " " + c.status + " " + c.v.join(" ") + " " + c.reason).toLowerCase().indexOf(text) < 0) return false;
      return true;
    });
    sortRows();
    state.page = 0;
    renderTable();
  }

  function sortRows() {
    var key = state.sortKey, dir = state.sortDir;
    var get = key === "id" ? function (c) { return c.id; }
      : key === "status" ? function (c) { return WORST_FIRST.indexOf(c.status); }
      : key === "reason" ? function (c) { return c.reason; }
      : function (c) { return c.v[+key]; };
    state.rows.sort(function (a, b) { return dir * natural(get(a), get(b)); });
  }

  function renderHead() {
    var d = state.data;
    var tr = el("tr");
    [["id", "case"], ["status", "status"]].concat(d.axes.map(function (a, i) { return [String(i), a]; }), [["reason", "reason"]])
      .forEach(function (col) {
        var th = el("th", { cls: "sortable", "data-key": col[0], text: col[1] + (state.sortKey === col[0] ? (state.sortDir > 0 ? " \u25b2" : " \u25bc") : "") });
        th.addEventListener("click", function () {
          state.sortDir = state.sortKey === col[0] ? -state.sortDir : 1;
          state.sortKey = col[0];
          sortRows();
          renderHead();
          renderTable();
        });
        tr.appendChild(th);
      });
    clear($("cases").tHead).appendChild(tr);
  }

  function renderTable() {
    var d = state.data, body = clear($("cases").tBodies[0]);
    var pages = Math.max(1, Math.ceil(state.rows.length / PAGE_SIZE));
    state.page = Math.min(state.page, pages - 1);
    var start = state.page * PAGE_SIZE;
    state.rows.slice(start, start + PAGE_SIZE).forEach(function (c) {
      var tr = el("tr", { cls: "case-row", "data-case": c.id, "data-status": c.status },
        el("td", null, el("code", { text: c.id })), el("td", null, badge(c.status)));
      c.v.forEach(function (v) { tr.appendChild(el("td", { text: v })); });
      tr.appendChild(el("td", { cls: "reason", text: c.reason + (c.flags ? " [" + c.flags.join(", ") + "]" : "") }));
      tr.addEventListener("click", function () { toggleCase(c.id, tr); });
      body.appendChild(tr);
      if (state.open === c.id) body.appendChild(detailRow(c, d.axes.length + 3));
    });
    var cell = state.cell ? " in the grid cell " + state.cell.map(function (p) { return d.axes[p[0]] + "=" + p[1]; }).join(", ") : "";
    $("table-count").textContent = state.rows.length + " of " + d.cases.length + " case(s)" + cell;
    if (state.cell) {
      var x = el("button", { type: "button", id: "clear-cell", text: "all cells" });
      x.addEventListener("click", function () { state.cell = null; applyFilters(); });
      $("table-count").appendChild(x);
    }
    $("page-no").textContent = "page " + (state.page + 1) + " of " + pages;
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
  }

  function toggleCase(id) {
    state.open = state.open === id ? null : id;
    renderTable();
  }

  function openCase(id) {
    var d = state.data;
    var index = state.rows.findIndex(function (c) { return c.id === id; });
    if (index < 0) {
      ["filter-status", "filter-axis", "filter-value", "filter-text"].forEach(function (f) { $(f).value = ""; });
      state.cell = null;
      applyFilters();
      index = state.rows.findIndex(function (c) { return c.id === id; });
    }
    if (index < 0) return;
    state.page = Math.floor(index / PAGE_SIZE);
    state.open = id;
    renderTable();
    var row = document.querySelector('tr.case-detail[data-case="' + CSS.escape(id) + '"]');
    if (row) row.scrollIntoView({ block: "center" });
    if (!d.details[id]) return;
  }

  function shown(v) {
    if (typeof v === "number" && !Number.isInteger(v)) return String(Number(v.toPrecision(6)));
    return typeof v === "object" ? JSON.stringify(v) : String(v);
  }

  function kvTable(obj, cls) {
    var t = el("dl", { cls: "kv " + (cls || "") });
    Object.keys(obj).forEach(function (k) {
      if (obj[k] === null || obj[k] === undefined || obj[k] === "") return;
      t.appendChild(el("dt", { text: k }));
      t.appendChild(el("dd", { text: shown(obj[k]) }));
    });
    return t;
  }

  function detailRow(c, span) {
    var d = state.data, det = d.details[c.id] || {};
    var box = el("div", { cls: "detail" });
    box.appendChild(el("h4", { text: "The call" }));
    box.appendChild(kvTable({ mode: det.mode, seed: det.seed, attributes: det.attributes, grad_inputs: det.grad_inputs, description: det.description }));
    var inputs = el("table", { cls: "inputs" }, el("tr", null, el("th", { text: "input" }), el("th", { text: "shape" }), el("th", { text: "strides" }),
      el("th", { text: "offset" }), el("th", { text: "dtype" }), el("th", { text: "layout" }), el("th", { text: "values" })));
    (det.inputs || []).forEach(function (i) {
      inputs.appendChild(i.none ? el("tr", null, el("td", { text: i.name }), el("td", { colspan: "6", text: "None" }))
        : el("tr", { cls: "input" }, el("td", { text: i.name }), el("td", { text: JSON.stringify(i.shape) }),
          el("td", { text: i.strides ? JSON.stringify(i.strides) : "contiguous" }), el("td", { text: String(i.offset) }),
          el("td", { text: i.dtype }), el("td", { text: i.layout }), el("td", null, el("code", { text: i.values }))));
    });
    box.appendChild(inputs);
    (det.outputs || []).forEach(function (o) {
      box.appendChild(el("h4", null, "Output ", el("code", { text: o.output }), " ", badge(o.passed ? "passed" : "numerical_mismatch")));
      if (o.verdict) box.appendChild(el("p", { text: o.verdict }));
      if (o.contract_mismatch) box.appendChild(el("p", { cls: "error", text: o.contract_mismatch }));
      box.appendChild(kvTable(Object.assign({ "shape (expected, actual)": o.shape, "dtype (expected, actual)": o.dtype }, o.metrics), "metrics"));
    });
    if (det.error) {
      box.appendChild(el("h4", { text: "Error" }));
      box.appendChild(kvTable({ signature: det.error.signature, type: det.error.type, signal: det.error.signal, exit_code: det.error.exit_code, phase: det.error.phase, matched_rule: det.error.matched_rule }));
      box.appendChild(el("pre", { cls: "message", text: det.error.message }));
      if (det.error.traceback_tail) box.appendChild(el("pre", { cls: "traceback", text: det.error.traceback_tail }));
    }
    if (det.log_tail) { box.appendChild(el("h4", { text: "Log tail" })); box.appendChild(el("pre", { cls: "log", text: det.log_tail })); }
    (det.pictures || []).forEach(function (name) {
      if (d.pictures[name]) box.appendChild(el("figure", null, el("img", { src: d.pictures[name], alt: name, cls: "picture" }), el("figcaption", { text: name })));
    });
    box.appendChild(el("h4", { text: "Reproducer" }));
    box.appendChild(det.repro
      ? (document.body.classList.contains("app") ? el("code", { text: det.repro }) : el("a", { href: det.repro, text: det.repro }))
      : el("p", null, "none exported yet: ", el("code", { text: det.repro_command || "" })));
    if (det.source) box.appendChild(kvTable({ host: det.source.host, device: det.source.device, raw_evidence: det.source.raw, recorded_at: det.recorded_at }));
    return el("tr", { cls: "case-detail", "data-case": c.id }, el("td", { colspan: String(span) }, box));
  }

  // ---- pictures and the whole page ----------------------------------------------------------
  function renderPictures(d) {
    var box = clear($("pictures"));
    var names = d.run_pictures || [];
    if (!names.length) box.appendChild(el("p", { cls: "none", text: "No run picture drawn (opdebug pictures RUN draws them)." }));
    names.forEach(function (name) {
      box.appendChild(el("figure", null, el("img", { src: d.pictures[name], alt: name, cls: "picture" }), el("figcaption", { text: name })));
    });
  }

  function render(d) {
    state.data = d;
    state.open = null;
    state.cell = null;
    renderHeader(d);
    renderFindings(d);
    var legend = clear($("legend"));
    WORST_FIRST.forEach(function (s) { legend.appendChild(badge(s)); });
    var dtype = d.axes.indexOf("dtype"), mode = d.axes.indexOf("mode");
    fillAxisSelect($("grid-rows"), d.axes, dtype >= 0 ? dtype : 0);
    fillAxisSelect($("grid-cols"), d.axes, mode >= 0 ? mode : Math.min(1, d.axes.length - 1));
    var status = clear($("filter-status"));
    status.appendChild(el("option", { value: "", text: "any" }));
    WORST_FIRST.forEach(function (s) { if (d.cases.some(function (c) { return c.status === s; })) status.appendChild(el("option", { value: s, text: s })); });
    var axis = clear($("filter-axis"));
    axis.appendChild(el("option", { value: "", text: "any" }));
    d.axes.forEach(function (a, i) { axis.appendChild(el("option", { value: String(i), text: a })); });
    fillValues();
    renderGrid();
    renderHead();
    applyFilters();
    renderPictures(d);
    // usable from here: the time since the navigation's start, read by benchmarks/bench_page.py
    document.body.setAttribute("data-ready", String(Math.round(performance.now())));
    var hash = /^#case=(.+)$/.exec(location.hash);
    if (hash) openCase(decodeURIComponent(hash[1]));
  }

  function wire() {
    $("grid-rows").addEventListener("change", renderGrid);
    $("grid-cols").addEventListener("change", renderGrid);
    $("filter-status").addEventListener("change", applyFilters);
    $("filter-axis").addEventListener("change", function () { fillValues(); applyFilters(); });
    $("filter-value").addEventListener("change", applyFilters);
    $("filter-text").addEventListener("input", applyFilters);
    $("prev").addEventListener("click", function () { state.page -= 1; renderTable(); });
    $("next").addEventListener("click", function () { state.page += 1; renderTable(); });
  }

  // ---- the MCP App side of the extension (io.modelcontextprotocol/ui) -------------------------
  // What an answer alone says (a host that cannot read resources): verdict, summary, findings.
  function fromAnswer(sc) {
    var findings = (sc.findings || []).map(function (f) {
      var p = f.minimal_pair;
      return { predicate: f.predicate, label: f.cause ? "cause " + f.cause : (f.status || ""), exact: !!f.exact,
        why_not_exact: f.why_not_exact || [], boundary: "", pair: p ? p.passing + " passes, " + p.failing + " fails" : "-",
        pair_cases: p ? [p.passing, p.failing] : [], terms: [], statement: f.statement, equivalent: f.equivalent || [],
        necessary_only: !!f.necessary_only, cases: f.cases || [], validation: null, counterexamples: f.counterexamples || [] };
    });
    var failing = (sc.failures || []).concat(sc.unsupported || []);
    return {
      run_id: sc.run_id,
      header: { title: "run " + sc.run_id, operator: "", verdict: sc.verdict || (sc.exact ? "exact" : sc.stopped || ""),
        summary: sc.summary || "", counts: sc.status_counts || {}, planned: sc.planned || 0, recorded: sc.recorded || 0 },
      findings: findings, competing: [], accounting: { lines: [] }, axes: ["mode", "dtype"],
      cases: failing.map(function (f) { return { id: f.case_id, status: f.status, v: [f.axes.mode || "-", f.axes.dtype || "-"], reason: f.reason || "" }; }),
      details: {}, pictures: {}, run_pictures: [], links: []
    };
  }

  function startBridge() {
    var nextId = 1, pending = {}, hostCapabilities = {};
    function send(message) { window.parent.postMessage(message, "*"); }
    function request(method, params) {
      var id = nextId++;
      send({ jsonrpc: "2.0", id: id, method: method, params: params });
      return new Promise(function (resolve, reject) { pending[id] = { resolve: resolve, reject: reject }; });
    }
    function notify(method, params) { send({ jsonrpc: "2.0", method: method, params: params }); }
    function onToolResult(result) {
      var sc = (result && result.structuredContent) || {};
      if (!sc.run_id) { $("summary").textContent = "The tool result names no run."; return; }
      render(fromAnswer(sc));
      if (!hostCapabilities.serverResources) return;
      request("resources/read", { uri: "opdebug://runs/" + sc.run_id + "/page" }).then(function (read) {
        var html = read.contents[0].text;
        var doc = new DOMParser().parseFromString(html, "text/html");
        render(JSON.parse(doc.getElementById("run-data").textContent));
      }, function (error) { $("summary").textContent += " (the whole run could not be read: " + (error && error.message) + ")"; });
    }
    window.addEventListener("message", function (event) {
      if (event.source !== window.parent) return;
      var m = event.data;
      if (!m || m.jsonrpc !== "2.0") return;
      if (m.method === undefined && pending[m.id]) {
        var p = pending[m.id];
        delete pending[m.id];
        if (m.error) p.reject(m.error); else p.resolve(m.result);
      } else if (m.method === "ui/notifications/tool-result") {
        onToolResult(m.params);
      } else if (m.method === "ui/resource-teardown" || m.method === "ping") {
        send({ jsonrpc: "2.0", id: m.id, result: {} });
      }
    });
    request("ui/initialize", {
      protocolVersion: "2026-01-26",
      appInfo: { name: "opdebug-run", version: "1" },
      appCapabilities: { availableDisplayModes: ["inline"] }
    }).then(function (result) {
      hostCapabilities = (result && result.hostCapabilities) || {};
      notify("ui/notifications/initialized", {});
      if (window.ResizeObserver) {
        new ResizeObserver(function () {
          notify("ui/notifications/size-changed", { width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight });
        }).observe(document.body);
      }
    });
  }

  wire();
  var data = JSON.parse($("run-data").textContent);
  if (data) render(data);
  else if (window.parent !== window) startBridge();
  else $("summary").textContent = "No run in this page: it is the MCP App view, shown by a host with a tool result.";
})();
