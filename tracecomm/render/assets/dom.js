// Shared by every tracecomm page (report.js, compare.js): DOM and SVG builders that set text
// through text nodes only, the colour of each collective type, and the pieces every page draws
// with (a section, its empty note, a legend, the tooltip). Loaded before the page's script, in
// the same <script> element.
var tracecommDom = (function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var TYPES = ["AllGather", "ReduceScatter", "AllReduce", "Broadcast", "Reduce", "AllToAll",
    "SendRecv", "Other"];
  var TYPE_COLOURS = ["#f28e2b", "#e15759", "#59a14f", "#edc948", "#9c755f", "#76b7b2",
    "#ff9da7", "#8f8f8f"];

  function el(tag, attrs) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }
  function sv(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }
  function setAttrs(node, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      if (attrs[k] !== null && attrs[k] !== undefined) node.setAttribute(k, String(attrs[k]));
    });
  }
  function append(node, child) {
    if (child === null || child === undefined) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
  function typeColour(type) {
    var i = TYPES.indexOf(type);
    return TYPE_COLOURS[i < 0 ? TYPE_COLOURS.length - 1 : i];
  }

  // a page section, appended to root: its heading and, if given, the line that explains it
  function section(root, id, title, explain) {
    var s = el("section", { id: id, "data-section": id }, el("h2", null, title));
    if (explain) s.appendChild(el("p", { class: "explain" }, explain));
    root.appendChild(s);
    return s;
  }
  function empty(s, why) {
    s.setAttribute("data-empty", "true");
    s.appendChild(el("p", { class: "empty" }, why));
  }
  // items: [label, colour] pairs
  function legend(items) {
    return el("div", { class: "legend" }, items.map(function (it) {
      return el("span", { style: "--swatch:" + it[1] }, it[0]);
    }));
  }
  // the collective types, each in its colour
  function typeLegend(types) {
    return legend(types.map(function (t) { return [t, typeColour(t)]; }));
  }
  // one tooltip for the page (text only), added to the body now; gives hover(node, text)
  function tooltip() {
    var tip = el("div", { id: "tip", role: "tooltip" });
    document.body.appendChild(tip);
    return function hover(node, text) {
      node.addEventListener("mousemove", function (ev) {
        tip.textContent = text;
        tip.style.display = "block";
        tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 300) + "px";
        tip.style.top = (ev.clientY + 14) + "px";
      });
      node.addEventListener("mouseleave", function () { tip.style.display = "none"; });
      node.appendChild(sv("title", null, text));  // also for keyboards and screenshots' DOM
    };
  }
  // draws the page's sections in order, then its footer, then marks root ready; a section that
  // cannot be drawn says so in its place, and the others still render
  function drawPage(root, draws, footer) {
    draws.forEach(function (draw) {
      try {
        draw();
      } catch (err) {
        var s = section(root, "error-" + draw.name, "Section could not be drawn");
        empty(s, String(err && err.message || err));
        console.error(err);
      }
    });
    footer();
    root.setAttribute("data-ready", "true");
  }

  return {
    SVG: SVG, TYPES: TYPES, TYPE_COLOURS: TYPE_COLOURS,
    el: el, sv: sv, setAttrs: setAttrs, append: append, typeColour: typeColour,
    section: section, empty: empty, legend: legend, typeLegend: typeLegend, tooltip: tooltip,
    drawPage: drawPage
  };
})();
