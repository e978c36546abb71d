// tracecomm HTML report: draws the embedded analysis document (report.schema.json) as SVG.
// Every string from a trace goes through textContent, never innerHTML.
(function () {
  "use strict";

  var doc = JSON.parse(document.getElementById("tracecomm-data").textContent);
  // the exported trace written beside the page (`tracecomm report --export`), else absent
  var traceData = document.getElementById("tracecomm-trace");
  var traceFile = traceData ? JSON.parse(traceData.textContent) : null;
  var root = document.getElementById("report");
  var D = tracecommDom;
  var COMPUTE = "#4e79a7", MEMORY = "#b07aa1", IDLE = "#d9dde2", EXPOSED = "#d62728";

  // ---- small helpers -------------------------------------------------------------------
  var el = D.el, sv = D.sv, typeColour = D.typeColour;
  function ms(ns) { return ns === null || ns === undefined ? "–" : (ns / 1e6).toFixed(2) + " ms"; }
  function pct(x) { return x === null || x === undefined ? "–" : x.toFixed(1) + " %"; }
  function ratio(x) { return x === null || x === undefined ? "–" : x.toFixed(2); }
  function bytes(b) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (b >= 10 || i === 0 ? b.toFixed(0) : b.toFixed(1)) + " " + units[i];
  }
  // node2 before node10, as the terminal orders them
  function naturally(a, b) {
    return String(a).localeCompare(String(b), undefined, { numeric: true });
  }
  function byId(list, key) {
    var out = {};
    (list || []).forEach(function (x) { out[x[key]] = x; });
    return out;
  }
  var empty = D.empty, legend = D.legend, hover = D.tooltip();  // one tooltip for the page
  function section(id, title, explain) { return D.section(root, id, title, explain); }

  // ---- 1. headline: the bottom line (metrics.md §14) ----------------------------------
  function headline() {
    var s = section("headline", "tracecomm report");
    var sum = doc.summary || {}, tp = doc.throughput || {}, parts = doc.step_parts || {};
    var found = doc.findings || [];
    s.appendChild(el("p", { class: "sub" },
      sum.ranks_analyzed + " ranks analyzed" +
      (sum.world_size ? " of " + sum.world_size : "") +
      ", steps " + (sum.steps || []).join(", ") + " · " + (doc.inputs || []).join(", ")));
    var fw = doc.frameworks;
    if (fw && fw.detected.length) {
      s.appendChild(el("p", { class: "sub framework" }, "Framework (from the trace's names, " +
        "metrics.md §14a): " + fw.detected.map(function (f) {
          return f.label + " (" + f.names.join(", ") + (f.ranks > 1 ? " on " + f.ranks +
            " ranks" : "") + ")";
        }).join("; ") + (fw.inference ? " · a serving engine: no training advice" : "")));
    }
    var hasMfu = tp.mfu !== null && tp.mfu !== undefined;
    var lines = sum.timelines || [];
    var cpuOnly = lines.length === 1 && lines[0] === "cpu";  // gloo: no GPU to be busy
    var top = found.length ? found[0] : null;
    var cards = [
      ["Step time", ms(tp.step_time_ns), tp.step_time_ns ?
        "the slowest rank's ProfilerStep, median" : "no ProfilerStep in the traces"],
      ["Tokens / s", tp.tokens_per_s ? Math.round(tp.tokens_per_s).toLocaleString("en-US") : "–",
        tp.tokens_per_s ? "" : "needs the model's tokens per step"],
      ["MFU", hasMfu && tp.mfu_possible !== false ? pct(tp.mfu * 100) : "–",
        !hasMfu ? (tp.flops ? "the model's FLOPs are known; the device's peak is not " +
          "(--peak-tflops)" : "needs the model's FLOPs") : tp.mfu_possible === false ?
          "impossible: " + pct(tp.mfu * 100) + " with the FLOPs given (see the first finding)" :
          "peak " + tp.peak_total_tflops + " TFLOP/s"],
      cpuOnly ? ["CPU busy", pct(parts.busy_pct), "CPU ops, of the step (no device work)"] :
        ["GPU busy", pct(parts.busy_pct), "a dashboard's figure, of the step"],
      ["Exposed comm", pct(parts.exposed_comm_pct), parts.basis ? "of " + parts.basis : ""],
      ["Costs the most", top ? top.title : "nothing", top ? cost(top) : "no finding of 2 % " +
        "of the step or more"]
    ];
    s.appendChild(el("div", { class: "cards" }, cards.map(function (c, i) {
      return el("div", { class: i === cards.length - 1 ? "card finding-card" : "card" },
        el("div", { class: "label" }, c[0]), el("div", { class: "value" }, c[1]),
        el("div", { class: "note" }, c[2]));
    })));
    s.appendChild(el("h3", null, "What costs the most, per step"));
    if (!found.length) {
      s.appendChild(el("p", { class: "empty" },
        "Nothing costs 2 % of the step or more: no finding."));
    } else {
      s.appendChild(el("ol", { class: "findings" }, found.map(finding)));
    }
    var notes = notices();
    if (notes.length) {
      s.appendChild(el("h3", null, "Notes"));
      s.appendChild(el("ul", { class: "diagnostics" }, notes.slice(0, 8).map(function (d) {
        return el("li", { class: d[0] }, d[1]);
      })));
    }
  }
  function cost(f) {
    if (f.cost_ns === null) return f.severity === "input" ? "fix the input first" :
      "cost unknown from the traces";
    var parts = doc.step_parts || {};
    var per = parts.per_step === false ? " of " + parts.basis : " per step";
    return ms(f.cost_ns) + per + " (" + pct(f.cost_pct) + ")";
  }
  function where(f) {
    var out = [];
    var all = (doc.ranks || []).length;
    if (all > 1 && f.ranks.length === all) out.push("all ranks");
    else if (f.ranks.length) out.push((f.ranks.length > 1 ? "ranks " : "rank ") +
      (f.ranks.length > 8 ? f.ranks.slice(0, 8).join(", ") + ", …" : f.ranks.join(", ")));
    if (f.stage !== null) out.push("stage " + f.stage);
    if (f.group) out.push("group " + f.group);
    if (f.hosts.length) out.push(f.hosts.join(", "));
    return out.join(" · ");
  }
  function finding(f) {
    var li = el("li", { class: "finding " + f.severity, "data-kind": f.kind },
      el("div", { class: "head" }, el("strong", null, f.title), " — " + cost(f),
        el("span", { class: "where" }, where(f) ? " — " + where(f) : "")));
    var rows = f.evidence.map(function (e) { return ["why", e]; })
      .concat(f.advice.map(function (a) { return ["try", a]; }));
    li.appendChild(el("dl", null, rows.map(function (r) {
      return el("div", { class: r[0] }, el("dt", null, r[0]), el("dd", null, r[1]));
    })));
    return li;
  }
  function notices() {
    // what is not a finding: missing ranks, warnings, NCCL warnings, notes, what MFU needs
    var out = [];
    (doc.missing_ranks || []).forEach(function (m) {
      out.push(["error", "rank " + (m.rank === null ? "?" : m.rank) + " missing: " + m.reason]);
    });
    if (doc.nccl && doc.nccl.diagnostics) {
      doc.nccl.diagnostics.forEach(function (d) {
        if (d.severity !== "error") out.push([d.severity, "NCCL: " + d.message]);
      });
    }
    (doc.warnings || []).forEach(function (w) { out.push(["warning", w]); });
    (doc.notes || []).forEach(function (n) {
      out.push(["info", n.text + " (ranks " + n.ranks.join(", ") + ")"]);
    });
    if (doc.throughput && doc.throughput.missing) out.push(["info", doc.throughput.missing]);
    return out;
  }

  // ---- 2. per-rank stacked bars --------------------------------------------------------
  function rankBars() {
    var s = section("ranks", "Where each rank's step went",
      "Per step, as each rank's analysis window ÷ its steps (GPU time from a step's first " +
      "kernel to the last included step's last; not the step time above): compute, " +
      "communication not hidden behind compute " +
      "by collective type, exposed memory copies, idle. Collective types exposed at the same " +
      "time share their part of the bar; the tooltip gives each type's own figure.");
    var ranks = (doc.ranks || []).filter(function (r) { return r.step_mean; });
    if (!ranks.length) { empty(s, "No rank has an analysis window (no complete step)."); return; }
    var types = (doc.by_type || []).map(function (t) { return t.coll_type; });
    s.appendChild(legend([["compute", COMPUTE]].concat(types.map(function (t) {
      return ["exposed " + t, typeColour(t)];
    })).concat([["exposed memory", MEMORY], ["idle", IDLE]])));
    var select = el("select", { id: "rank-sort" },
      el("option", { value: "rank" }, "rank"), el("option", { value: "exposed" }, "exposed comm"));
    s.appendChild(el("div", { class: "controls" }, "Sort by ", select, " (grouped by host)"));
    var holder = el("div", { id: "rank-bars" });
    s.appendChild(holder);
    function rows(order) {
      var data = ranks.map(function (r) {
        var m = r.step_mean, byType = m.exposed_comm_by_type_ns;  // the analysis's mean step
        // types exposed at once share their part of the bar (drawn to the exposed total)
        var typeSum = 0;
        types.forEach(function (t) { typeSum += byType[t] || 0; });
        var scale = typeSum > 0 ? m.exposed_comm_ns / typeSum : 0;
        var parts = [["compute", m.compute_ns, COMPUTE, m.compute_ns]];
        types.forEach(function (t) {
          parts.push(["exposed " + t, (byType[t] || 0) * scale, typeColour(t), byType[t] || 0]);
        });
        parts.push(["exposed memory", m.exposed_memory_ns, MEMORY, m.exposed_memory_ns]);
        parts.push(["idle", m.idle_ns, IDLE, m.idle_ns, idleText(m.idle_by_cause_ns)]);
        return { rank: r.rank, host: r.host || "(no host)", parts: parts,
          total: m.window_ns, exposed: m.exposed_comm_ns };
      });
      var hosts = [];
      data.forEach(function (d) { if (hosts.indexOf(d.host) < 0) hosts.push(d.host); });
      hosts.sort(naturally);
      var out = [];
      hosts.forEach(function (h) {
        var group = data.filter(function (d) { return d.host === h; });
        group.sort(order === "exposed" ?
          function (a, b) { return b.exposed - a.exposed || a.rank - b.rank; } :
          function (a, b) { return a.rank - b.rank; });
        out.push({ host: h });
        group.forEach(function (d) { out.push(d); });
      });
      return out;
    }
    function draw(order) {
      var list = rows(order), rowH = 16, left = 70, width = 1000, plotW = width - left - 110;
      var max = 0;
      list.forEach(function (d) { if (d.total > max) max = d.total; });
      var svg = sv("svg", { width: width, height: list.length * rowH + 30, class: "rank-bars" });
      list.forEach(function (d, i) {
        var y = i * rowH;
        if (!d.parts) {
          svg.appendChild(sv("g", { class: "host" }, sv("text", { x: 0, y: y + 12 }, d.host)));
          return;
        }
        var g = sv("g", { class: "rank-row", "data-rank": d.rank });
        g.appendChild(sv("text", { x: left - 6, y: y + 12, "text-anchor": "end" }, "rank " + d.rank));
        var x = left;
        d.parts.forEach(function (p) {
          var w = max > 0 ? p[1] / max * plotW : 0;
          if (w <= 0) return;
          var rect = sv("rect", { x: x, y: y + 2, width: Math.max(w, 0.5), height: rowH - 4,
            fill: p[2] });
          hover(rect, "rank " + d.rank + " (" + d.host + ")\n" + p[0] + ": " + ms(p[3]) +
            " per step" + (p[4] || "") + "\nanalysis window ÷ steps: " + ms(d.total));
          g.appendChild(rect);
          x += w;
        });
        g.appendChild(sv("text", { x: x + 6, y: y + 12 }, ms(d.total)));
        svg.appendChild(g);
      });
      axis(svg, left, list.length * rowH + 4, plotW, max, function (v) { return ms(v); });
      holder.textContent = "";
      holder.appendChild(svg);
    }
    select.addEventListener("change", function () { draw(select.value); });
    draw("rank");
    idleTable(s);
    var pipes = doc.pipelines || [];
    pipes.filter(function (v) { return !v.shown_as; }).forEach(function (v) {
      pipelineTable(s, v, pipes.filter(function (o) { return o.shown_as === v.group; }));
    });
  }
  // one table per distinct verdict, then the pipelines like it (metrics.md §10: shown_as)
  function pipelineTable(s, v, alike) {
    s.appendChild(el("h3", null, "Pipeline " + v.group + ": " + v.stages + " stages, " +
      (v.microbatches ? v.microbatches + " micro-batches" : "micro-batches unknown") +
      (v.textbook_bubble_pct !== null ? "; textbook 1F1B bubble " + pct(v.textbook_bubble_pct) : "")));
    var table = el("table", { class: "figures pipeline", "data-group": v.group },
      el("tr", null, el("th", null, "stage"), el("th", null, "rank"), el("th", null, "bubble"),
        el("th", null, "compute / step")));
    v.per_stage.forEach(function (st) {
      table.appendChild(el("tr", { "data-stage": st.stage }, el("td", null, String(st.stage)),
        el("td", null, String(st.rank)), el("td", null, pct(st.bubble_pct)),
        el("td", null, ms(st.compute_ns))));
    });
    s.appendChild(table);
    s.appendChild(el("p", { class: "explain" }, v.verdict));
    if (alike.length) {
      var worst = 0;
      alike.forEach(function (o) {
        o.per_stage.forEach(function (st) { worst = Math.max(worst, st.bubble_pct); });
      });
      s.appendChild(el("p", { class: "explain alike", "data-alike": alike.length },
        alike.length + " more pipeline" + (alike.length > 1 ? "s" : "") + " like this (" +
        alike.slice(0, 3).map(function (o) { return o.group; }).join(", ") +
        (alike.length > 3 ? ", …" : "") + "): bubble up to " + pct(worst) +
        " (all in the JSON)"));
    }
  }
  var CAUSES = {
    pipeline_fill: "pipeline fill", pipeline_drain: "pipeline drain",
    pipeline_wait: "waiting for a pipeline peer", sync: "after a synchronize",
    dataloader: "waiting for the data loader", host_bound: "kernels launched late (CPU-bound)",
    other: "other"
  };
  function idleText(causes) {
    if (!causes) return "";
    return Object.keys(causes).filter(function (c) { return causes[c] > 0; })
      .map(function (c) { return "\n  " + (CAUSES[c] || c) + ": " + ms(causes[c]); }).join("");
  }
  function idleTable(s) {
    var causes = (doc.summary || {}).idle_by_cause, shares = (doc.summary || {}).idle_by_cause_pct;
    if (!causes || !shares) return;
    s.appendChild(el("h3", null, "Where idle time goes (all ranks, metrics.md §10)"));
    var table = el("table", { class: "figures", id: "idle-causes" },
      el("tr", null, el("th", null, "cause"), el("th", null, "idle"), el("th", null, "share")));
    Object.keys(causes).sort(function (a, b) { return causes[b] - causes[a]; })
      .forEach(function (c) {
        if (!causes[c]) return;
        table.appendChild(el("tr", { "data-cause": c }, el("td", null, CAUSES[c] || c),
          el("td", null, ms(causes[c])), el("td", null, pct(shares[c]))));
      });
    s.appendChild(table);
  }
  function axis(svg, x0, y0, w, max, label) {
    var g = sv("g", { class: "axis" });
    g.appendChild(sv("line", { x1: x0, x2: x0 + w, y1: y0, y2: y0 }));
    for (var i = 0; i <= 4; i++) {
      var x = x0 + w * i / 4;
      g.appendChild(sv("line", { x1: x, x2: x, y1: y0, y2: y0 + 4 }));
      g.appendChild(sv("text", { x: x, y: y0 + 16, "text-anchor": "middle" }, label(max * i / 4)));
    }
    svg.appendChild(g);
  }

  // the replay's candidates (metrics.md §6): which rank, stage, replica or host to fix
  function flaggedFixes(st) {
    return st && st.candidates ? st.candidates.filter(function (c) { return c.flagged; }) : [];
  }
  function topFix(st) { return flaggedFixes(st)[0] || null; }
  function candidateName(c) {
    return c.kind === "host" && c.host ? "host " + c.host : c.kind + " " + c.index;
  }
  function fixName(c) {
    return candidateName(c) + (c.kind === "rank" ? "" : " (" + rankList(c.ranks) + ")");
  }
  function rankList(ranks) {
    return ranks.length <= 6 ? "ranks " + ranks.join(", ") :
      ranks.length + " ranks: " + ranks.slice(0, 4).join(", ") + ", …, " + ranks[ranks.length - 1];
  }
  function fixTable(s, st) {
    var shown = (st.candidates || []).filter(function (c) { return c.gain_ns > 0; }).slice(0, 8);
    var rp = st.replay;
    s.appendChild(el("h3", null, "What to fix (dependency replay)"));
    if (rp) {
      s.appendChild(el("p", { class: "explain" }, "Replaying the recorded work gives " +
        ms(rp.step_ns) + " for the ranks' median step of " + ms(rp.measured_step_ns) + " (" +
        rp.reproduction_error_pct.toFixed(2) + " % off, tolerance " + rp.tolerance_pct + " %)" +
        (rp.reproduces ? "." : ": " + rp.reason)));
      (rp.inferred_waits || []).forEach(function (d) {
        s.appendChild(el("p", { class: "explain inferred-wait" }, "Hidden wait: ranks " +
          d.waiters.join(", ") + " wait for " + d.source_element + " before " +
          d.waiter_element + " in " + d.steps + " of " + d.of_steps + " steps (" +
          ms(d.idle_per_step_ns) + " idle per step, resuming " + ms(d.lag_min_ns) + "–" +
          ms(d.lag_max_ns) + " after it): inferred, not recorded (metrics.md §6)."));
      });
      if (rp.recoverable_pct_idle_as_wait !== null && rp.recoverable_pct_idle_as_wait !== undefined) {
        s.appendChild(el("p", { class: "explain idle-reading" },
          "Idle that nothing explains, read as a wait instead of work: " +
          pct(rp.recoverable_pct_idle_as_wait) + " back (" + pct(rp.recoverable_pct) +
          " read as work)" + (rp.idle_decides.length ? "; the idle of " +
          rp.idle_decides.map(function (d) {
            return "rank " + d.rank + " (" + ms(d.idle_per_step_ns) + " per step, " +
              d.moves_pct.toFixed(1) + " points)";
          }).join(", ") + " decides" : "") + "."));
      }
    }
    if (!shown.length) {
      s.appendChild(el("p", { class: "empty" },
        "No rank, stage, replica or host would shorten the step."));
      return;
    }
    var table = el("table", { class: "figures", id: "what-to-fix" },
      el("tr", null, el("th", null, "fix"), el("th", null, "ranks"),
        el("th", null, "the ranks' median step"),
        el("th", null, "back"), el("th", null, "by op type (gain with only that part fixed)")));
    shown.forEach(function (c) {
      var parts = c.by_op_type_pct ? Object.keys(c.by_op_type_pct).map(function (k) {
        return k + " " + pct(c.by_op_type_pct[k]);
      }).join(", ") : "–";
      table.appendChild(el("tr", { "data-kind": c.kind, "data-index": c.index,
        class: c.flagged ? "flagged" : "" },
        el("td", null, (c.flagged ? "⚑ " : "") + candidateName(c)),
        el("td", null, rankList(c.ranks)),
        el("td", null, ms(st.median_step_ns) + " → " + ms(c.step_if_fixed_ns)),
        el("td", null, pct(c.recoverable_pct)), el("td", null, parts)));
    });
    s.appendChild(table);
  }

  // ---- 3. straggler heat map -----------------------------------------------------------
  function heatmap() {
    var s = section("stragglers", "Who made the others wait",
      "Root delay of each rank per step (metrics.md §6): what it caused itself — its compute " +
      "over its peers' (or the other stages') plus the delay it alone caused at the " +
      "collectives it reached last, less what it had inherited waiting for others. Ranks " +
      "that were late only because they waited stay pale.");
    var st = doc.stragglers;
    if (!st) {
      empty(s, "No straggler figures: they need two or more ranks with matched collectives.");
      return;
    }
    var cells = st.delay_by_step || [];
    var ranks = (doc.ranks || []).map(function (r) { return r.rank; }).sort(function (a, b) {
      return a - b;
    });
    var steps = [];
    cells.forEach(function (c) { if (steps.indexOf(c.step) < 0) steps.push(c.step); });
    (doc.summary.steps || []).forEach(function (x) { if (steps.indexOf(x) < 0) steps.push(x); });
    steps.sort(function (a, b) { return a - b; });
    if (!steps.length) { empty(s, "No step has matched collectives."); return; }
    var value = {}, max = 0;
    var caused = {};
    cells.forEach(function (c) {
      var root = c.root_delay_ns == null ? c.delay_caused_ns : c.root_delay_ns;
      value[c.rank + ":" + c.step] = root;
      caused[c.rank + ":" + c.step] = c.delay_caused_ns;
      if (root > max) max = root;
    });
    var flagged = st.flagged || [];
    var cellW = Math.max(14, Math.min(60, Math.floor(880 / steps.length)));
    var cellH = ranks.length > 128 ? 4 : (ranks.length > 64 ? 7 : 14);
    var left = 70, top = 20;
    var svg = sv("svg", { width: left + steps.length * cellW + 160,
      height: top + ranks.length * cellH + 10, class: "heatmap" });
    steps.forEach(function (step, j) {
      svg.appendChild(sv("text", { x: left + j * cellW + cellW / 2, y: 12,
        "text-anchor": "middle" }, String(step)));
    });
    ranks.forEach(function (rank, i) {
      var y = top + i * cellH;
      if (cellH >= 10 || i % Math.ceil(12 / cellH) === 0) {
        svg.appendChild(sv("text", { x: left - 6, y: y + Math.min(cellH, 12) - 2,
          "text-anchor": "end" }, "rank " + rank + (flagged.indexOf(rank) >= 0 ? " ⚑" : "")));
      }
      steps.forEach(function (step, j) {
        var v = value[rank + ":" + step] || 0;
        var t = max > 0 ? v / max : 0;
        var rect = sv("rect", { x: left + j * cellW, y: y, width: cellW - 1, height: cellH - 1,
          fill: heat(t), class: "cell", "data-rank": rank, "data-step": step });
        hover(rect, "rank " + rank + ", step " + step + "\nroot delay: " + ms(v) +
          "\ndelay caused (inherited included): " + ms(caused[rank + ":" + step] || 0));
        svg.appendChild(rect);
      });
    });
    var lx = left + steps.length * cellW + 20;
    for (var k = 0; k <= 4; k++) {
      svg.appendChild(sv("rect", { x: lx + k * 14, y: top, width: 14, height: 10,
        fill: heat(k / 4), stroke: "#d1d9e0" }));
    }
    svg.appendChild(sv("text", { x: lx, y: top + 24 }, "0 … " + ms(max)));
    s.appendChild(svg);
    s.appendChild(el("p", { class: "explain" }, flagged.length ?
      "Flagged (⚑, by " + st.flag_basis + "): rank " + flagged.join(", ") + ". The ranks' median step " +
      ms(st.median_step_ns) + "; without the straggler(s) about " +
      ms(st.step_if_no_straggler_replay_ns || st.step_if_no_straggler_ns) + "." :
      "No rank is flagged as a straggler."));
    if (st.replay) fixTable(s, st);
    slowestTable(s, st.slowest_instances || []);
  }

  // the collective instances that took longest: which call, who came last, wait vs transfer
  function slowestTable(s, rows) {
    if (!rows.length) return;
    s.appendChild(el("h3", null, "Slowest collective instances"));
    s.appendChild(el("p", { class: "explain" }, "From the first member's arrival to the " +
      "earliest end (metrics.md §6): the wait for the last member, then the transfer."));
    var table = el("table", { class: "figures slowest" }, el("tr", null,
      ["group", "type", "seq / key", "step", "ranks", "last", "wait", "transfer"].map(
        function (h) { return el("th", null, h); })));
    rows.forEach(function (i) {
      table.appendChild(el("tr", { "data-key": i.key }, [i.group, i.coll_type, i.key,
        i.step === null ? "–" : String(i.step), String(i.ranks),
        i.last_rank === null ? "–" : String(i.last_rank), ms(i.arrival_skew_ns),
        ms(i.transfer_ns)].map(function (v) { return el("td", null, v); })));
    });
    s.appendChild(table);
  }

  function heat(t) {  // white to red
    return "rgb(" + Math.round(255 - 41 * t) + "," + Math.round(255 - 216 * t) + "," +
      Math.round(255 - 215 * t) + ")";
  }

  // ---- 4. one-step timeline ------------------------------------------------------------
  function timeline() {
    var s = section("timeline", "One step, three ranks",
      "The same step (the median rank's median step) on the fastest, median and slowest rank " +
      "by median step window and on the worst flagged straggler, or on the ranks chosen with " +
      "--timeline-ranks; one lane per stream. Red marks communication that compute did not " +
      "hide. Times from each rank's own step start.");
    var tl = doc.timeline;
    if (!tl) { empty(s, "No timeline in this document (it comes with `tracecomm report`)."); return; }
    if (!tl.ranks.length) { empty(s, "No timeline: " + (tl.reason || "no step")); return; }
    var span = 0;
    tl.ranks.forEach(function (r) {
      if (r.timeline && r.timeline.window_ns > span) span = r.timeline.window_ns;
    });
    s.appendChild(legend([["compute", COMPUTE]].concat(
      (doc.by_type || []).map(function (t) { return [t.coll_type, typeColour(t.coll_type)]; }))
      .concat([["memory", MEMORY], ["exposed comm", EXPOSED]])));
    tl.ranks.forEach(function (r) {
      s.appendChild(el("h3", null, "rank " + r.rank + " (" + r.role + "), step " + tl.step +
        (r.timeline ? ": " + ms(r.timeline.window_ns) : "")));
      if (!r.timeline) { s.appendChild(el("p", { class: "empty" }, r.reason || "no data")); return; }
      s.appendChild(lanes(r, span));
    });
  }
  function lanes(r, span) {
    var t = r.timeline, laneH = 18, left = 120, plotW = 860, top = 4;
    var rows = t.lanes.length + 1;
    var svg = sv("svg", { width: left + plotW + 20, height: top + rows * laneH + 26,
      class: "timeline", "data-rank": r.rank });
    var x = function (ns) { return left + ns / span * plotW; };
    t.lanes.forEach(function (lane, i) {
      var y = top + i * laneH;
      svg.appendChild(sv("text", { x: left - 6, y: y + 12, "text-anchor": "end" },
        "gpu " + (lane.device === null ? "?" : lane.device) + " stream " +
        (lane.stream === null ? "?" : lane.stream)));
      lane.segments.forEach(function (seg) {
        var fill = seg.cls === "comm" ? typeColour(seg.coll_type) :
          (seg.cls === "memory" ? MEMORY : COMPUTE);
        var rect = sv("rect", { x: x(seg.start_ns), y: y + 2,
          width: Math.max(x(seg.end_ns) - x(seg.start_ns), 0.6), height: laneH - 4, fill: fill,
          class: "segment" });
        hover(rect, (seg.coll_type || seg.cls) + ": " + ms(seg.end_ns - seg.start_ns) + " at " +
          ms(seg.start_ns) + (seg.kernels > 1 ? "\n" + seg.kernels + " kernels, longest:" : "") +
          "\n" + (seg.name || ""));
        svg.appendChild(rect);
      });
    });
    var ey = top + t.lanes.length * laneH;
    svg.appendChild(sv("text", { x: left - 6, y: ey + 12, "text-anchor": "end" }, "exposed"));
    t.exposed.forEach(function (e) {
      var w = Math.max(x(e.end_ns) - x(e.start_ns), 0.6);
      svg.insertBefore(sv("rect", { x: x(e.start_ns), y: top, width: w, height: t.lanes.length * laneH,
        fill: EXPOSED, "fill-opacity": 0.12 }), svg.firstChild);
      var rect = sv("rect", { x: x(e.start_ns), y: ey + 3, width: w, height: laneH - 6,
        fill: EXPOSED, class: "exposed" });
      hover(rect, "exposed " + e.coll_type + ": " + ms(e.end_ns - e.start_ns) + " at " +
        ms(e.start_ns));
      svg.appendChild(rect);
    });
    axis(svg, left, top + rows * laneH + 2, plotW, span, function (v) { return ms(v); });
    return svg;
  }

  // ---- 5. bandwidth --------------------------------------------------------------------
  function bandwidth() {
    var s = section("bandwidth", "Collective bandwidth",
      "Bus bandwidth (metrics.md §7, waiting excluded) against message size, median per size " +
      "bucket and collective type.");
    var bw = doc.bandwidth;
    if (!bw || !bw.rows || !bw.rows.length) {
      empty(s, "No bandwidth figures: they need matched collectives whose traces record message " +
        "sizes (PyTorch's collective metadata)" + (bw && bw.without_size ?
          "; " + bw.without_size + " instances had none." : "."));
      return;
    }
    var left = 60, top = 10, w = 760, h = 300;
    var rows = bw.rows.filter(function (r) { return r.bytes_median > 0; });
    var link = bw.link_gbps ? bw.link_gbps / 8 : null;  // Gbit/s -> GB/s
    var lo = Infinity, hi = -Infinity, ymax = link || 0;
    rows.forEach(function (r) {
      lo = Math.min(lo, r.bytes_median); hi = Math.max(hi, r.bytes_median);
      ymax = Math.max(ymax, r.busbw_gbps);
    });
    var l0 = Math.floor(Math.log2(lo)) - 1, l1 = Math.ceil(Math.log2(hi)) + 1;
    ymax = ymax * 1.1 || 1;
    var X = function (b) { return left + (Math.log2(b) - l0) / (l1 - l0) * w; };
    var Y = function (v) { return top + h - v / ymax * h; };
    var svg = sv("svg", { width: left + w + 180, height: top + h + 40, class: "bandwidth" });
    var grid = sv("g", { class: "grid axis" });
    for (var i = 0; i <= 5; i++) {
      var v = ymax * i / 5;
      grid.appendChild(sv("line", { x1: left, x2: left + w, y1: Y(v), y2: Y(v) }));
      grid.appendChild(sv("text", { x: left - 6, y: Y(v) + 4, "text-anchor": "end" },
        v.toFixed(v < 10 ? 1 : 0)));
    }
    var step = Math.max(1, Math.ceil((l1 - l0) / 8));
    for (var e = l0; e <= l1; e += step) {
      grid.appendChild(sv("text", { x: X(Math.pow(2, e)), y: top + h + 16, "text-anchor": "middle" },
        bytes(Math.pow(2, e))));
    }
    grid.appendChild(sv("text", { x: 0, y: top + 4 }, "GB/s"));
    svg.appendChild(grid);
    if (link) {
      svg.appendChild(sv("line", { x1: left, x2: left + w, y1: Y(link), y2: Y(link),
        stroke: "#1f2328", "stroke-dasharray": "5 4", class: "link" }));
      svg.appendChild(sv("text", { x: left + w + 6, y: Y(link) + 4 },
        "link " + bw.link_gbps + " Gbit/s"));
    }
    var types = [];
    rows.forEach(function (r) { if (types.indexOf(r.coll_type) < 0) types.push(r.coll_type); });
    types.forEach(function (type) {
      var pts = rows.filter(function (r) { return r.coll_type === type; })
        .sort(function (a, b) { return a.bytes_median - b.bytes_median; });
      if (pts.length > 1) {
        svg.appendChild(sv("polyline", { fill: "none", stroke: typeColour(type), "stroke-width": 2,
          points: pts.map(function (p) { return X(p.bytes_median) + "," + Y(p.busbw_gbps); })
            .join(" ") }));
      }
      pts.forEach(function (p) {
        var c = sv("circle", { cx: X(p.bytes_median), cy: Y(p.busbw_gbps), r: 5,
          fill: typeColour(type), class: "point" });
        hover(c, type + ", " + p.size_bucket + " (median " + bytes(p.bytes_median) + ")\n" +
          "busbw " + p.busbw_gbps.toFixed(1) + " GB/s, algbw " + p.algbw_gbps.toFixed(1) +
          " GB/s\n" + p.instances + " instances" +
          (p.below_link_pct !== null ? "\n" + pct(p.below_link_pct) + " below the link" : ""));
        svg.appendChild(c);
      });
    });
    s.appendChild(D.typeLegend(types));
    s.appendChild(svg);
  }

  // ---- 6. scaling view -----------------------------------------------------------------
  function scaling() {
    var s = section("scaling", "Which collective dominates as the job grows",
      "Per step, the mean over ranks (metrics.md §14): each collective type's communication " +
      "time, hidden (light) and exposed (dark), against the compute it can hide behind " +
      "(line). With more GPUs (strong scaling) compute per GPU shrinks while ring collectives " +
      "do not: the type whose bar reaches the line first becomes the exposed one.");
    // every figure is the step parts' (metrics.md §14): per step, the mean over ranks, as
    // the headline and the findings have them
    var parts = doc.step_parts || {};
    var comms = parts.comm_by_type_ns || {}, exposeds = parts.exposed_comm_by_type_ns || {};
    var types = Object.keys(comms).sort(function (a, b) { return comms[b] - comms[a]; });
    var compute = parts.compute_ns || 0, step = parts.per_step ? parts.step_ns : null;
    if (!types.length || !compute) {
      empty(s, "No communication in the analysis window: nothing to scale.");
      return;
    }
    var shares = parts.exposed_comm_by_type_pct || {}, commShares = parts.comm_by_type_pct || {};
    var ratios = parts.comm_by_type_over_compute || {};
    var left = 110, w = 700, rowH = 26, top = 6;
    var max = compute;
    types.forEach(function (t) { max = Math.max(max, comms[t]); });
    var svg = sv("svg", { width: left + w + 200, height: top + types.length * rowH + 30,
      class: "scaling" });
    types.forEach(function (t, i) {
      var y = top + i * rowH, comm = comms[t], exposed = exposeds[t] || 0;
      var g = sv("g", { class: "type-row", "data-type": t });
      g.appendChild(sv("text", { x: left - 6, y: y + 16, "text-anchor": "end" }, t));
      var hidden = sv("rect", { x: left, y: y + 4, width: (comm - exposed) / max * w,
        height: rowH - 8, fill: typeColour(t), "fill-opacity": 0.35 });
      var shown = sv("rect", { x: left + (comm - exposed) / max * w, y: y + 4,
        width: exposed / max * w, height: rowH - 8, fill: typeColour(t) });
      var text = t + " per step\ncomm " + ms(comm) + " (" + pct(commShares[t] || 0) +
        " of the step), exposed " + ms(exposed) + " (" + pct(shares[t] || 0) + ")" +
        "\ncomm ÷ compute " + ratio(ratios[t]);
      hover(hidden, text); hover(shown, text);
      g.appendChild(hidden); g.appendChild(shown);
      g.appendChild(sv("text", { x: left + comm / max * w + 6, y: y + 16 },
        ms(comm) + " (" + ratio(ratios[t]) + " × compute)"));
      svg.appendChild(g);
    });
    var cx = left + compute / max * w;
    svg.appendChild(sv("line", { x1: cx, x2: cx, y1: top, y2: top + types.length * rowH,
      stroke: COMPUTE, "stroke-width": 2, class: "compute-line" }));
    axis(svg, left, top + types.length * rowH + 2, w, max, function (v) { return ms(v); });
    s.appendChild(svg);
    var table = el("table", { class: "figures" }, el("tr", null, el("th", null, "collective"),
      el("th", null, "comm / step"), el("th", null, "comm share of the step"),
      el("th", null, "exposed / step"), el("th", null, "exposed share of the step"),
      el("th", null, "comm ÷ compute")));
    types.forEach(function (t) {
      table.appendChild(el("tr", null, el("td", null, t), el("td", null, ms(comms[t])),
        el("td", null, pct(commShares[t] || 0)), el("td", null, ms(exposeds[t] || 0)),
        el("td", null, pct(shares[t] || 0)), el("td", null, ratio(ratios[t]))));
    });
    s.appendChild(table);
    s.appendChild(el("p", { class: "explain" }, "Per step, the mean over ranks of each rank's " +
      "share of its steps (metrics.md §14): compute " + ms(compute) +
      (step ? "; step time " + ms(step) : " of " + parts.basis) + "."));
    projection(s);
  }
  function projection(s) {
    var p = doc.projection;
    s.appendChild(el("h3", null, "Projected to other world sizes (metrics.md §11, an estimate)"));
    if (!p) {
      s.appendChild(el("p", { class: "empty", id: "projection-empty" },
        "Not projected: `tracecomm report RUN --project` adds fitted latency and bandwidth and " +
        "the step replayed at N/2 … 16N GPUs."));
      return;
    }
    if (p.reason) {
      s.appendChild(el("p", { class: "empty", id: "projection-empty" }, "No projection: " + p.reason));
      return;
    }
    var types = [];
    p.sizes.forEach(function (z) {
      Object.keys(z.exposed_comm_ns).forEach(function (t) { if (types.indexOf(t) < 0) types.push(t); });
    });
    var head = el("tr", null, el("th", null, "GPUs"), el("th", null, "projected step"),
      el("th", null, "throughput ×"), el("th", null, "MFU"), el("th", null, "exposed comm"));
    types.forEach(function (t) { head.appendChild(el("th", null, t + " exposed")); });
    var table = el("table", { class: "figures", id: "projection" }, head);
    p.sizes.forEach(function (z, i) {
      var row = el("tr", { "data-world": z.world_size },
        el("td", null, z.world_size.toLocaleString("en-US") + (i === 0 ? " (measured)" : "")),
        el("td", null, ms(z.step_ns)),
        el("td", null, z.relative_throughput.toFixed(2) +
          (z.world_size === p.turning_point ? " ◀ peak" : "")),
        el("td", null, z.mfu === null ? "–" : pct(100 * z.mfu)),
        el("td", null, ms(z.exposed_comm_total_ns)));
      types.forEach(function (t) { row.appendChild(el("td", null, ms(z.exposed_comm_ns[t] || 0))); });
      table.appendChild(row);
    });
    s.appendChild(table);
    s.appendChild(el("p", { class: "explain" }, p.turning_point !== null ?
      "Throughput peaks at " + p.turning_point + " GPUs: beyond it, adding GPUs makes this job " +
      "slower." : "No turning point in the projected range: throughput still grows."));
    s.appendChild(el("p", { class: "explain" }, "Fitted: " + p.fits.map(function (f) {
      return f.coll_type + " α " + (f.alpha_ns / 1e3).toFixed(2) + " µs/hop, B " +
        (f.bus_gbps === null ? "–" : f.bus_gbps.toFixed(1) + " GB/s") + " (error " +
        f.fit_error_pct.toFixed(1) + " %)";
    }).join("; ") + ". Assumptions: " + p.assumptions.join("; ") + "."));
  }

  // ---- 5a. all-to-all and expert parallelism (metrics.md §7a) -------------------------
  function allToAll() {
    var a = doc.all_to_all;
    if (!a) return;  // no rank ran an all-to-all: no section
    var uses = { expert: "expert parallel", embedding: "embedding exchange" };
    var what = (a.use ? [uses[a.use]] : []).concat(a.libraries || []);
    var s = section("alltoall", "All-to-all" + (what.length ? " (" + what.join(" · ") + ")" : ""),
      "How much of the all-to-all time hides behind compute, how much of each rank's is " +
      "waiting for the group's last member and how much transfer, and whether the ranks " +
      "receive like amounts of tokens (metrics.md §7a).");
    s.appendChild(el("p", { class: "a2a-summary" }, ms(a.comm_ns) + " over all ranks, " +
      pct(a.hidden_pct) + " of it hidden behind compute, " + ms(a.exposed_ns) + " exposed; " +
      (a.wait_ns !== null ? ms(a.wait_ns) + " waiting, " + ms(a.transfer_ns) + " transfer" :
        "wait vs transfer: – (" + a.wait_reason + ")")));
    var imb = a.imbalance;
    s.appendChild(el("p", { class: "a2a-imbalance" }, imb ?
      "Token imbalance: rank " + imb.busiest_rank + " receives " + ratio(imb.ratio) +
        "× the median rank's " + imb.unit + " (" + ratio(imb.worst_instance_ratio) +
        "× in the most uneven instance)" + (imb.gain_ns !== null ? "; balancing it gives back " +
          ms(imb.gain_ns) + " per step (" + pct(imb.gain_pct) + ")" : "") :
      "Token imbalance: – (" + a.imbalance_reason + ")"));
    var table = el("table", { class: "figures a2a" }, el("tr", null,
      ["rank", "kernels", "time", "exposed", "hidden", "wait", "transfer", "received"].map(
        function (h) { return el("th", null, h); })));
    a.ranks.forEach(function (r) {
      table.appendChild(el("tr", { "data-rank": r.rank }, [String(r.rank), String(r.kernels),
        ms(r.comm_ns), ms(r.exposed_ns), pct(r.hidden_pct), ms(r.wait_ns), ms(r.transfer_ns),
        r.received === null ? "–" : r.received.toLocaleString("en-US")].map(
        function (v) { return el("td", null, v); })));
    });
    s.appendChild(table);
  }

  // the trace beside the page: a link, and how to open it where the timeline can be read
  function traceLink() {
    if (!traceFile) return;
    var s = section("trace", "The trace, on a timeline",
      "The exported trace (metrics.md §17) of the ranks and steps above, with tracecomm's own " +
      "tracks: exposed communication by type, idle by cause, waits in collectives, findings.");
    s.appendChild(el("p", null, "Written beside this page: ",
      // a relative link to the file beside the page, whatever its name holds
      el("a", { href: "./" + encodeURIComponent(traceFile), download: traceFile,
        class: "trace-file" }, traceFile), "."));
    s.appendChild(el("ol", { class: "explain" },
      el("li", null, "Open ui.perfetto.dev (it runs in the browser; the trace is " +
        "read from your disk, never uploaded), or chrome://tracing."),
      el("li", null, "Choose \u201cOpen trace file\u201d and pick " + traceFile + "."),
      el("li", null, "Each rank is a process; the tracecomm tracks sit under its GPU streams.")));
  }

  function footer() {
    var tool = doc.tool || {};
    root.appendChild(el("footer", null, "Made by " + tool.name + " " + tool.version +
      " from its JSON document (schema " + doc.schema_version + "): `tracecomm analyze " +
      "--format json --detail timeline` gives the same figures."));
  }

  D.drawPage(root, [headline, rankBars, heatmap, timeline, bandwidth, allToAll, scaling, traceLink],
    footer);
}());
