// Shared by every tracecomm page (report.js, compare.js): DOM and SVG builders that set text
// through text nodes only, and the colour of each collective type. Loaded before the page's
// script, in the same <script> element.
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

  return {
    SVG: SVG, TYPES: TYPES, TYPE_COLOURS: TYPE_COLOURS,
    el: el, sv: sv, setAttrs: setAttrs, append: append, typeColour: typeColour
  };
})();
