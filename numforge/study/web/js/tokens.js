/* Tokens as chips: the token's text with its id below. */

import { clear, el } from "./dom.js";
import { hideTip, showTip } from "./tip.js";

export function chip(shown, id, className) {
  var c = el("span", "tok" + (className ? " " + className : ""));
  c.appendChild(document.createTextNode(shown));
  if (id !== undefined) c.appendChild(el("small", null, id));
  return c;
}

/* tokens: [{id, shown, text, bytes}]; opts.selected, opts.onClick(i), opts.onHover(i or -1), opts.className(i) */
export function tokenStrip(container, tokens, opts) {
  clear(container);
  opts = opts || {};
  if (opts.onClick) container.removeAttribute("role"); else container.setAttribute("role", "list");
  tokens.forEach(function (t, i) {
    var extra = (opts.className ? opts.className(i) : "") + (i === opts.selected ? " on" : "") + (opts.onClick ? " click" : "");
    var c = chip(t.shown, t.id, extra.trim());
    c.setAttribute("data-position", String(i));
    c.addEventListener("pointerenter", function (e) {
      showTip(["position " + i + "   id " + t.id, "text  " + t.shown, "bytes " + (t.bytes || "(none)")], e.clientX, e.clientY);
      if (opts.onHover) opts.onHover(i);
    });
    c.addEventListener("pointerleave", function (e) {
      if (e.pointerType === "touch") return;  /* the end of a tap: keep what it showed */
      hideTip();
      if (opts.onHover) opts.onHover(-1);
    });
    keyboard(c, i, t, opts);
    container.appendChild(c);
  });
}

/* each chip a tab stop named by its position, id and text; a clickable one is a button (Enter or Space) */
function keyboard(c, i, t, opts) {
  c.tabIndex = 0;
  c.setAttribute("role", opts.onClick ? "button" : "listitem");
  c.setAttribute("aria-label", "position " + i + ", id " + t.id + ", text " + JSON.stringify(t.shown));
  if (opts.onClick) {
    if (i === opts.selected) c.setAttribute("aria-pressed", "true");
    c.addEventListener("click", function () { opts.onClick(i); });
    c.addEventListener("keydown", function (e) {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); opts.onClick(i); }
    });
  }
  c.addEventListener("focus", function () {
    var r = c.getBoundingClientRect();
    showTip(["position " + i + "   id " + t.id, "text  " + t.shown, "bytes " + (t.bytes || "(none)")], r.left, r.bottom);
    if (opts.onHover) opts.onHover(i);
  });
  c.addEventListener("blur", function () { hideTip(); if (opts.onHover) opts.onHover(-1); });
}
