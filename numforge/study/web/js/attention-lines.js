/* The attention view's other drawing: each query joined to its keys by lines as strong as their weights. */

import { arrowKeys } from "./alt.js";
import { clear, el } from "./dom.js";
import { fit, sharp } from "./draw.js";

const ROW = 18;  /* pixels per token */

/* labels: the tokens; value(q, k): the weight on the chosen scale; focus(q, -1) when a query is pointed at */
export function attentionLines(box, labels, value, focus) {
  var T = labels.length, width = Math.min(box.parentNode.clientWidth - 4, 720);
  var selected = -1;
  clear(box);
  var sizer = el("div", "sizer"), canvas = el("canvas");
  sizer.style.width = width + "px";
  sizer.style.height = T * ROW + "px";
  sizer.appendChild(canvas);
  box.appendChild(sizer);
  function draw() { drawLines(box, canvas, width, labels, value, selected); }
  box.onscroll = draw;
  box.onpointermove = box.onpointerdown = function (e) {
    var i = Math.floor((e.clientY - box.getBoundingClientRect().top + box.scrollTop) / ROW);
    selected = i >= 0 && i < T ? i : -1;
    if (selected >= 0) focus(selected, -1);
    draw();
  };
  box.onpointerleave = function (e) { if (e.pointerType !== "touch") { selected = -1; draw(); } };
  arrowKeys(box, T, 1, function (i) {
    selected = i;
    box.scrollTop = Math.max(0, Math.min(box.scrollTop, i * ROW), (i + 1) * ROW - box.clientHeight);
    focus(i, -1);
    draw();
  });
  draw();
}

/* the visible tokens on both sides, and the lines of the selected query (or of every visible one) */
function drawLines(box, canvas, width, labels, value, selected) {
  var T = labels.length, H = Math.min(box.clientHeight, T * ROW), ctx = sharp(canvas, width, H), sy = box.scrollTop;
  var i0 = Math.floor(sy / ROW), i1 = Math.min(T, Math.ceil((sy + H) / ROW)), xl = 150, xr = width - 150;
  ctx.font = "12px ui-monospace, monospace";
  ctx.textBaseline = "middle";
  for (var i = i0; i < i1; i++) {
    var y = (i + 0.5) * ROW - sy;
    ctx.fillStyle = i === selected ? "#e11d48" : "#333";
    ctx.textAlign = "right";
    ctx.fillText(fit(ctx, labels[i], 140), xl - 6, y);
    ctx.textAlign = "left";
    ctx.fillText(fit(ctx, labels[i], 140), xr + 6, y);
  }
  ctx.lineWidth = 2;
  var queries = selected >= 0 ? [selected] : [];
  if (selected < 0) for (i = i0; i < i1; i++) queries.push(i);
  queries.forEach(function (q) {
    for (var k = 0; k <= q; k++) {
      var v = value(q, k);
      if (!v) continue;
      ctx.strokeStyle = "rgba(29, 78, 216, " + Math.min(1, v * (selected >= 0 ? 1 : 0.6)).toFixed(3) + ")";
      ctx.beginPath();
      ctx.moveTo(xl, (q + 0.5) * ROW - sy);
      ctx.lineTo(xr, (k + 0.5) * ROW - sy);
      ctx.stroke();
    }
  });
}
