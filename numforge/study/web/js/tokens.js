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
    if (opts.onClick) c.addEventListener("click", function () { opts.onClick(i); });
    container.appendChild(c);
  });
}
