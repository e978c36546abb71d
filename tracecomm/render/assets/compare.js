// tracecomm compare page: draws the embedded comparison (compare.schema.json, metrics.md §18)
// as tables and SVG. Every string from an input (run labels are paths) goes through
// textContent, never innerHTML. Figures are computed by tracecomm; this only lays them out.
(function () {
  "use strict";

  var doc = JSON.parse(document.getElementById("tracecomm-data").textContent);
  var root = document.getElementById("report");
  var D = tracecommDom;
  var TYPES = D.TYPES;
  var COMPUTE = "#4e79a7", MEMORY = "#b07aa1", IDLE = "#9aa4ae", LINE = "#1f2328";
  var runs = doc.runs || [];

  // ---- small helpers -------------------------------------------------------------------
  var el = D.el, sv = D.sv, typeColour = D.typeColour;
  function has(x) { return x !== null && x !== undefined; }
  function ms(ns) { return has(ns) ? (ns / 1e6).toFixed(3) : "–"; }
  function signedMs(ns) {
    if (!has(ns)) return "–";
    return (ns > 0 ? "+" : ns < 0 ? "−" : "±") + (Math.abs(ns) / 1e6).toFixed(3);
  }
  function pct(x) { return has(x) ? x.toFixed(1) + " %" : "–"; }
  function signedPct(x) {
    if (!has(x)) return "–";
    return (x > 0 ? "+" : x < 0 ? "−" : "±") + Math.abs(x).toFixed(1) + " %";
  }
  function num(x, d) { return has(x) ? x.toLocaleString("en-US", { maximumFractionDigits: d || 0 }) : "–"; }
  function change(c, points, name) {
    if (!c) return "";
    if (points) {
      var d = c.delta * points;
      return Math.abs(d) < 0.05 ? "±0 pt" : (d > 0 ? "+" : "−") + Math.abs(d).toFixed(1) + " pt";
    }
    if (!has(c.relative)) {  // none (or almost none) in the first run: the difference itself
      if (!c.delta) return "";
      var ns = name && (/_ns$/.test(name) || /^(exposed_|idle\.)/.test(name));
      return ns ? signedMs(c.delta) + " ms" : (c.delta > 0 ? "+" : "−") + num(Math.abs(c.delta));
    }
    var r = 100 * c.relative;
    return Math.abs(r) < 0.05 ? "±0 %" : (r > 0 ? "+" : "−") + Math.abs(r).toFixed(1) + " %";
  }
  var empty = D.empty, hover = D.tooltip();
  function section(id, title, explain) { return D.section(root, id, title, explain); }
  function table(id, head, rows) {
    var t = el("table", { class: "figures", id: id },
      el("tr", null, head.map(function (h) { return el("th", null, h); })));
    rows.forEach(function (r) {
      var tr = el("tr", r.attrs || null);
      r.cells.forEach(function (c) { tr.appendChild(el("td", null, c)); });
      t.appendChild(tr);
    });
    return t;
  }
  function typesOf() {
    var out = [];
    runs.forEach(function (r) {
      Object.keys((r.typical_step || {}).exposed_comm_by_type_ns || {}).forEach(function (t) {
        if (out.indexOf(t) < 0) out.push(t);
      });
    });
    return out.sort(function (a, b) { return TYPES.indexOf(a) - TYPES.indexOf(b); });
  }

  // ---- 1. headline and the table ------------------------------------------------------
  function headline() {
    var s = section("headline", "tracecomm compare");
    s.appendChild(el("p", { class: "sub" }, runs.length + " runs, " + doc.scaling +
      " scaling, ordered " + (doc.order === "world size" ? "by world size" : "as given") +
      "; every change against " + (runs[0] ? runs[0].label : "the first run") +
      " (metrics.md §18)."));
    var last = runs[runs.length - 1] || {};
    var cards = [
      ["Scaling efficiency", has(last.scaling_efficiency) ? pct(100 * last.scaling_efficiency) : "–",
        last.label ? "at " + last.world_size + " GPUs (" + last.label + ")" : ""],
      ["Step time", ms(last.step_time_ns) + " ms",
        change((last.changes || {}).step_time_ns, null, "step_time_ns")],
      ["Exposed comm", last.typical_step ? pct(last.typical_step.exposed_comm_pct) : "–",
        "of the typical step"]
    ];
    s.appendChild(el("div", { class: "cards" }, cards.map(function (c) {
      return el("div", { class: "card" }, el("div", { class: "label" }, c[0]),
        el("div", { class: "value" }, c[1]), el("div", { class: "note" }, c[2]));
    })));
    if ((doc.notes || []).length || (doc.warnings || []).length) {
      s.appendChild(el("ul", { class: "diagnostics" },
        (doc.warnings || []).map(function (w) { return el("li", { class: "warning" }, w); })
          .concat((doc.notes || []).map(function (n) { return el("li", { class: "info" }, n); }))));
    }
  }

  function runTable() {
    var s = section("runs", "The runs side by side",
      "Step time is metrics.md §8's (the slowest rank's median ProfilerStep span); the " +
      "partition rows are of each run's typical step (one step window of its median rank), in " +
      "ms and % of that step. Δ: against the first run.");
    var head = ["figure"];
    runs.forEach(function (r, i) { head.push(r.label); if (i) head.push("Δ"); });
    var rows = [];
    function row(label, key, value, changeName, points) {
      var cells = [label];
      runs.forEach(function (r, i) {
        cells.push(value(r));
        if (i) cells.push(changeName ? change((r.changes || {})[changeName], points, changeName) : "");
      });
      rows.push({ cells: cells, attrs: { "data-figure": key } });
    }
    function typical(fn) { return function (r) { return r.typical_step ? fn(r.typical_step) : "–"; }; }
    // the share is the analysis's (metrics.md §18): this page computes no figure
    function share(ns, p) { return ms(ns) + " · " + (has(p) ? p.toFixed(1) : "–") + " %"; }
    row("World size", "world_size", function (r) { return String(r.world_size); });
    row("Ranks analyzed", "ranks_analyzed", function (r) { return String(r.ranks_analyzed); });
    row("Step time ms", "step_time_ns", function (r) { return ms(r.step_time_ns); }, "step_time_ns");
    row("Tokens/s", "tokens_per_s", function (r) { return num(r.tokens_per_s); }, "tokens_per_s");
    row("Tokens/s per GPU", "tokens_per_s_per_gpu", function (r) { return num(r.tokens_per_s_per_gpu); },
      "tokens_per_s_per_gpu");
    row("Scaling efficiency", "scaling_efficiency", function (r) {
      return has(r.scaling_efficiency) ? pct(100 * r.scaling_efficiency) : "–";
    });
    row("MFU", "mfu", function (r) { return has(r.mfu) ? pct(100 * r.mfu) : "–"; }, "mfu", 100);
    row("Typical step ms", "typical_step_ns", typical(function (t) { return ms(t.window_ns); }),
      "typical_step_ns");
    row("busy", "busy_pct", typical(function (t) { return pct(t.busy_pct); }), "busy_pct", 1);
    row("compute", "compute_ns", typical(function (t) { return share(t.compute_ns, t.compute_pct); }), "compute_ns");
    row("exposed comm", "exposed_comm_ns", typical(function (t) { return share(t.exposed_comm_ns, t.exposed_comm_pct); }),
      "exposed_comm_ns");
    typesOf().forEach(function (type) {
      row("↳ " + type, "exposed_comm." + type, typical(function (t) {
        return share(t.exposed_comm_by_type_ns[type] || 0, t.exposed_comm_by_type_pct[type] || 0);
      }), "exposed_comm." + type);
    });
    row("exposed memory", "exposed_memory_ns", typical(function (t) { return share(t.exposed_memory_ns, t.exposed_memory_pct); }),
      "exposed_memory_ns");
    row("idle", "idle_ns", typical(function (t) { return share(t.idle_ns, t.idle_pct); }), "idle_ns");
    row("Straggler recoverable", "straggler_recoverable_pct", function (r) {
      return pct(r.straggler_recoverable_pct);
    }, "straggler_recoverable_pct", 1);
    row("Avg power per GPU W", "avg_power_w", function (r) { return num(r.avg_power_w, 1); }, "avg_power_w");
    row("Energy per step J", "energy_per_step_j", function (r) { return num(r.energy_per_step_j, 1); },
      "energy_per_step_j");
    row("Tokens per J", "tokens_per_j", function (r) { return num(r.tokens_per_j, 3); }, "tokens_per_j");
    s.appendChild(table("run-table", head, rows));
  }

  // ---- 2. the scaling plot -----------------------------------------------------------
  function plot(title, series, yLabel, format) {
    var left = 58, top = 22, w = 330, h = 190;
    var xs = [], ymax = 0;
    series.forEach(function (se) {
      se.points.forEach(function (p) {
        if (xs.indexOf(p[0]) < 0) xs.push(p[0]);
        ymax = Math.max(ymax, p[1]);
      });
    });
    xs.sort(function (a, b) { return a - b; });
    ymax = ymax * 1.15 || 1;
    var l0 = Math.log2(xs[0]), l1 = Math.log2(xs[xs.length - 1]);
    var X = function (n) { return left + (l1 > l0 ? (Math.log2(n) - l0) / (l1 - l0) * w : w / 2); };
    var Y = function (v) { return top + h - v / ymax * h; };
    var svg = sv("svg", { width: left + w + 30, height: top + h + 40, class: "scaling-plot" });
    svg.appendChild(sv("text", { x: 0, y: 12, "font-weight": "600" }, title + " (" + yLabel + ")"));
    var grid = sv("g", { class: "grid axis" });
    for (var i = 0; i <= 4; i++) {
      var v = ymax * i / 4;
      grid.appendChild(sv("line", { x1: left, x2: left + w, y1: Y(v), y2: Y(v) }));
      grid.appendChild(sv("text", { x: left - 6, y: Y(v) + 4, "text-anchor": "end" }, format(v)));
    }
    xs.forEach(function (n) {
      grid.appendChild(sv("text", { x: X(n), y: top + h + 16, "text-anchor": "middle" }, String(n)));
    });
    grid.appendChild(sv("text", { x: left + w / 2, y: top + h + 32, "text-anchor": "middle" },
      "GPUs (world size)"));
    svg.appendChild(grid);
    series.forEach(function (se) {
      if (se.points.length > 1) {
        svg.appendChild(sv("polyline", { fill: "none", stroke: se.colour, "stroke-width": 2,
          "data-series": se.name, points: se.points.map(function (p) {
            return X(p[0]) + "," + Y(p[1]);
          }).join(" ") }));
      }
      se.points.forEach(function (p) {
        var c = sv("circle", { cx: X(p[0]), cy: Y(p[1]), r: 4, fill: se.colour, class: "point",
          "data-series": se.name, "data-world": p[0] });
        hover(c, se.name + " at " + p[0] + " GPUs: " + format(p[1]) + (p[2] ? "\n" + p[2] : ""));
        svg.appendChild(c);
      });
    });
    return svg;
  }
  function scaling() {
    var s = section("scaling", "Scaling: throughput per GPU, exposed communication and MFU",
      "Against world size (log scale). Throughput per GPU is tokens/s per GPU when the runs " +
      "know their tokens, else the scaling efficiency (the same curve, relative to the first " +
      "run); exposed communication per collective type is the typical step's.");
    var worlds = {};
    runs.forEach(function (r) { worlds[r.world_size] = true; });
    if (Object.keys(worlds).length < 2) {
      empty(s, "The runs have one world size: nothing to plot against it (see the tables).");
      return;
    }
    var holder = el("div", { class: "plots", style: "display:flex;flex-wrap:wrap;gap:18px" });
    var tokens = runs.every(function (r) { return has(r.tokens_per_s_per_gpu); });
    var tp = runs.filter(function (r) {
      return tokens ? true : has(r.scaling_efficiency);
    }).map(function (r) {
      return [r.world_size, tokens ? r.tokens_per_s_per_gpu : 100 * r.scaling_efficiency, r.label];
    });
    holder.appendChild(plot(tokens ? "Tokens/s per GPU" : "Scaling efficiency",
      [{ name: tokens ? "tokens/s per GPU" : "scaling efficiency", colour: COMPUTE, points: tp }],
      tokens ? "tokens/s" : "%", function (v) { return tokens ? num(v) : v.toFixed(0); }));
    var types = typesOf();
    holder.appendChild(plot("Exposed comm per typical step", types.map(function (t) {
      return { name: t, colour: typeColour(t), points: runs.filter(function (r) {
        return r.typical_step;
      }).map(function (r) {
        return [r.world_size, (r.typical_step.exposed_comm_by_type_ns[t] || 0) / 1e6, r.label];
      }) };
    }), "ms", function (v) { return v.toFixed(v < 10 ? 2 : 1); }));
    var mfu = runs.filter(function (r) { return has(r.mfu); }).map(function (r) {
      return [r.world_size, 100 * r.mfu, r.label];
    });
    if (mfu.length) {
      holder.appendChild(plot("MFU", [{ name: "MFU", colour: LINE, points: mfu }], "%",
        function (v) { return v.toFixed(1); }));
    } else {
      holder.appendChild(el("p", { class: "empty", id: "mfu-empty" },
        "No MFU: it needs the model's FLOPs (--model-flops-per-step, or --flops-per-token with " +
        "--tokens-per-step, or a model config)."));
    }
    s.appendChild(D.typeLegend(types));
    s.appendChild(holder);
  }

  // ---- 3. where the time went ---------------------------------------------------------
  function decomposition() {
    var s = section("decomposition", "Where the time went",
      "Each run's typical step against the first run's, part by part: the parts add up to the " +
      "difference of the typical steps exactly (ms). Δ step time is metrics.md §8's; what the " +
      "partition of one step window does not hold is listed apart.");
    var pairs = doc.pairs || [];
    if (!pairs.some(function (p) { return p.decomposition; })) {
      empty(s, "No run pair has two analyzed step windows.");
      return;
    }
    var head = ["part"].concat(pairs.map(function (p) {
      return runs[p.run].label + " − " + runs[p.baseline].label;
    }));
    var rows = [];
    function row(label, key, fn) {
      rows.push({ attrs: { "data-part": key }, cells: [label].concat(pairs.map(function (p) {
        return p.decomposition ? signedMs(fn(p.decomposition)) : "–";
      })) });
    }
    row("Δ typical step", "delta_step_ns", function (d) { return d.delta_step_ns; });
    row("Δ compute", "delta_compute_ns", function (d) { return d.delta_compute_ns; });
    row("Δ exposed comm", "delta_exposed_comm_ns", function (d) { return d.delta_exposed_comm_ns; });
    var types = [];
    pairs.forEach(function (p) {
      Object.keys((p.decomposition || {}).delta_exposed_comm_by_type_ns || {}).forEach(function (t) {
        if (types.indexOf(t) < 0) types.push(t);
      });
    });
    types.forEach(function (t) {
      row("↳ " + t, "type:" + t, function (d) { return d.delta_exposed_comm_by_type_ns[t] || 0; });
    });
    if (pairs.some(function (p) { return p.decomposition && p.decomposition.delta_types_overlap_ns; })) {
      row("↳ less: types exposed at once", "overlap", function (d) { return -d.delta_types_overlap_ns; });
    }
    row("Δ exposed memory", "delta_exposed_memory_ns", function (d) { return d.delta_exposed_memory_ns; });
    row("Δ idle", "delta_idle_ns", function (d) { return d.delta_idle_ns; });
    rows.push({ attrs: { "data-part": "delta_step_time_ns" }, cells: ["Δ step time (§8)"].concat(
      pairs.map(function (p) { return signedMs(p.delta_step_time_ns); })) });
    rows.push({ attrs: { "data-part": "unpartitioned_ns" }, cells: ["not in the partition"].concat(
      pairs.map(function (p) { return signedMs(p.unpartitioned_ns); })) });
    s.appendChild(table("decomposition-table", head, rows));
    pairs.forEach(function (p) { if (p.decomposition) s.appendChild(bars(p, types)); });
  }
  function bars(p, types) {
    var d = p.decomposition, parts = [["compute", d.delta_compute_ns, COMPUTE]];
    types.forEach(function (t) {
      parts.push(["exposed " + t, d.delta_exposed_comm_by_type_ns[t] || 0, typeColour(t)]);
    });
    if (d.delta_types_overlap_ns) parts.push(["types exposed at once", -d.delta_types_overlap_ns, "#bbb"]);
    parts.push(["exposed memory", d.delta_exposed_memory_ns, MEMORY]);
    parts.push(["idle", d.delta_idle_ns, IDLE]);
    var max = 0;
    parts.forEach(function (x) { max = Math.max(max, Math.abs(x[1])); });
    var left = 190, w = 560, rowH = 18, mid = left + w / 2;
    var svg = sv("svg", { width: left + w + 120, height: parts.length * rowH + 28, class: "delta-bars",
      "data-run": p.run });
    svg.appendChild(sv("text", { x: 0, y: 12, "font-weight": "600" },
      runs[p.run].label + " − " + runs[p.baseline].label + ": " + signedMs(d.delta_step_ns) + " ms"));
    parts.forEach(function (x, i) {
      var y = 20 + i * rowH, len = max ? Math.abs(x[1]) / max * w / 2 : 0;
      svg.appendChild(sv("text", { x: left - 6, y: y + 12, "text-anchor": "end" }, x[0]));
      var rect = sv("rect", { x: x[1] < 0 ? mid - len : mid, y: y + 2, width: Math.max(len, 0.5),
        height: rowH - 4, fill: x[2], class: "delta" });
      hover(rect, x[0] + ": " + signedMs(x[1]) + " ms");
      svg.appendChild(rect);
      svg.appendChild(sv("text", { x: x[1] < 0 ? mid + 6 : mid - 6, y: y + 12,
        "text-anchor": x[1] < 0 ? "start" : "end" }, signedMs(x[1])));
    });
    svg.appendChild(sv("line", { x1: mid, x2: mid, y1: 18, y2: 20 + parts.length * rowH,
      stroke: LINE }));
    return svg;
  }

  // ---- 4. collectives -----------------------------------------------------------------
  function collectives() {
    var s = section("collectives", "Largest changes by collective",
      "Per step and member rank, largest change in time first: kernel time (waiting " +
      "included), §6 transfer time (moving data) and §7 bus bandwidth.");
    var pairs = doc.pairs || [];
    pairs.forEach(function (p) {
      var c = p.collectives;
      s.appendChild(el("h3", null, runs[p.run].label + " against " + runs[p.baseline].label +
        (c.level === "type" ? " (by type)" : "")));
      if (!c.rows.length) { s.appendChild(el("p", { class: "empty" }, "No collective in either run.")); return; }
      function side(f, fn) { return f ? fn(f) : "–"; }
      function both(r, fn) { return side(r.base, fn) + " → " + side(r.run, fn); }
      s.appendChild(table("collectives-" + p.run, ["collective", "group", "size", "status",
        "calls/step", "time/step ms", "Δ ms", "transfer/step ms", "wait/step ms", "busbw GB/s"],
        c.rows.slice(0, 12).map(function (r) {
        return { attrs: { "data-type": r.coll_type, "data-status": r.status },
          cells: [r.coll_type, r.group, r.size_bucket, r.status,
          both(r, function (f) { return f.calls_per_step.toFixed(1); }),
          both(r, function (f) { return ms(f.time_per_step_ns); }),
          signedMs(r.delta_time_per_step_ns),
          both(r, function (f) { return ms(f.transfer_per_step_ns); }),
          both(r, function (f) { return ms(f.wait_per_step_ns); }),
          both(r, function (f) { return has(f.busbw_gbps) ? f.busbw_gbps.toPrecision(3) : "–"; })] };
      })));
      if (c.note) s.appendChild(el("p", { class: "explain" }, "Note: " + c.note));
    });
  }

  // ---- 5. kernels -------------------------------------------------------------------
  var KERNEL_ROWS = 10, KERNEL_NAME_CHARS = 72;
  function shortName(name) {
    return name.length <= KERNEL_NAME_CHARS ? name : name.slice(0, KERNEL_NAME_CHARS - 1) + "…";
  }
  function kernels() {
    var s = section("kernels", "Largest changes by kernel",
      "Per step of each run's median rank, largest change in time first: calls, time (the " +
      "calls' durations summed) and the part of it exposed on the step's partition " +
      "(metrics.md §3: not hidden behind a kernel of a higher class), with the share of the " +
      "step change that exposed change makes. † paired with a name that differs only in " +
      "template arguments, parameters or a launch-bounds suffix. Every change: the JSON, or " +
      "--table kernel-changes.");
    var pairs = doc.pairs || [];
    if (!pairs.some(function (p) { return p.kernels && !p.kernels.missing; })) {
      empty(s, "No per-kernel statistics: " + ((pairs[0] || {}).kernels || {}).missing);
      return;
    }
    pairs.forEach(function (p) {
      var k = p.kernels;
      s.appendChild(el("h3", null, runs[p.run].label + " against " + runs[p.baseline].label));
      if (k.missing) { s.appendChild(el("p", { class: "empty" }, "By kernel: " + k.missing)); return; }
      if (!k.changes.length) { s.appendChild(el("p", { class: "empty" }, "No kernel changed.")); return; }
      function both(v, fn) {
        return v.map(function (x) { return has(x) ? fn(x) : "–"; }).join(" → ");
      }
      var shown = k.changes.slice(0, KERNEL_ROWS);
      s.appendChild(el("p", { class: "explain" }, shown.length + " of " + k.changes.length +
        " changes; Δ step of the median rank " + signedMs(k.step_change_ns) + " ms, of it " +
        signedMs(k.delta_not_kernels_ns) + " ms in no kernel (idle, unlinked work)."));
      s.appendChild(table("kernels-" + p.run, ["kernel", "class", "status", "calls/step",
        "time/step ms", "Δ ms", "Δ exposed ms", "of Δ step"], shown.map(function (c) {
        var status = c.status + (c.paired_by === "family" ? " †" : "");
        return { attrs: { "data-kernel": c.name, "data-status": c.status },
          cells: [shortName(c.name), c["class"], status,
            both(c.calls, function (x) { return x.toFixed(1); }), both(c.time_ns, ms),
            signedMs(c.delta_ns), signedMs(c.delta_exposed_ns), signedPct(c.step_change_share_pct)] };
      })));
      if (k.note) s.appendChild(el("p", { class: "explain" }, "Note: " + k.note));
    });
  }

  // ---- 6. projection against measurement ---------------------------------------------
  function projection() {
    var s = section("projection", "Projection against measurement",
      "The first run's scaling projection (metrics.md §11, an estimate) at the other runs' " +
      "world sizes, beside what they measured: the typical step, its exposed communication, " +
      "and throughput relative to the first run.");
    var p = doc.projection || {};
    if (!p.rows || !p.rows.length) { empty(s, "No projection to check: " + (p.missing || "none")); return; }
    s.appendChild(table("projection-table", ["GPUs", "run", "typical step projected", "measured", "error",
      "exposed comm projected", "measured", "error", "throughput × projected", "measured", "error"],
      p.rows.map(function (r) {
        return { attrs: { "data-world": r.world_size }, cells: [String(r.world_size), runs[r.run].label,
          ms(r.projected_step_ns), ms(r.measured_step_ns), signedPct(r.step_error_pct),
          ms(r.projected_exposed_comm_ns), ms(r.measured_exposed_comm_ns), signedPct(r.exposed_comm_error_pct),
          r.projected_relative_throughput.toFixed(3), has(r.measured_relative_throughput) ?
            r.measured_relative_throughput.toFixed(3) : "–", signedPct(r.throughput_error_pct)] };
      })));
    if (p.note) s.appendChild(el("p", { class: "explain" }, p.note));
  }

  function footer() {
    var tool = doc.tool || {};
    root.appendChild(el("footer", null, "Made by " + tool.name + " " + tool.version +
      " from its comparison document (schema " + doc.schema_version + "): `tracecomm compare " +
      "--format json` gives the same figures."));
  }

  D.drawPage(root, [headline, runTable, scaling, decomposition, collectives, kernels, projection], footer);
}());
