/* Text alternatives for what a canvas draws: a name for the picture and a table of its numbers, hidden from the
   eye and read by a screen reader (WCAG 1.1.1); the arrow keys for a picture one points into (2.1.1). */

import { $, clear, el, head, row } from "./dom.js";

/* node (a canvas, or the box holding one) named by summary; its numbers in a visually hidden table right after
   it, captioned by summary: header the column names, rows arrays of cells' texts. Drawn again, replaced. */
export function describe(node, summary, header, rows) {
  node.setAttribute("role", node.tagName === "CANVAS" ? "img" : "group");
  node.setAttribute("aria-label", summary);
  var id = node.id + "-text", box = $(id);  /* a table takes its content's width: the box hides it */
  if (!box) {
    box = el("div", "visually-hidden");
    box.id = id;
    node.insertAdjacentElement("afterend", box);
  }
  var table = clear(box).appendChild(el("table"));
  table.appendChild(el("caption", null, summary));
  head(table, header);
  rows.forEach(function (cells) { row(table, cells.map(String)); });
}

/* a colour key's ramp says nothing its two end labels do not */
export function decorative(canvas) { canvas.setAttribute("aria-hidden", "true"); }

/* said to a screen reader when the keyboard moves in a picture */
export function say(text) { $("said").textContent = text; }

/* arrow keys move a cursor over a rows x cols picture (Home/End: the row's first and last); move(i, j) shows the
   cell */
export function arrowKeys(node, rows, cols, move) {
  var at = [0, 0];
  node.onkeydown = function (e) {
    var step = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[e.key];
    if (e.key === "Home") step = [0, -at[1]];
    if (e.key === "End") step = [0, cols - 1 - at[1]];
    if (!step) return;
    e.preventDefault();
    at = [Math.min(rows - 1, Math.max(0, at[0] + step[0])), Math.min(cols - 1, Math.max(0, at[1] + step[1]))];
    move(at[0], at[1]);
  };
}
