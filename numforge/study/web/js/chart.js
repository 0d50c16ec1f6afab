/* A line chart of rows' columns against their step (column 0): the training view's loss and learning rate. */

import { fmt } from "./dom.js";
import { sharp } from "./draw.js";

/* series: [{column, color, name, dots}]; level: {value, name}, a dashed line (or null) */
export function chart(canvas, rows, series, level) {
  var width = Math.min(900, canvas.parentNode.clientWidth), height = canvas.classList.contains("small") ? 140 : 320;
  var ctx = sharp(canvas, width, height), pad = { l: 56, r: 12, t: 12, b: 26 };
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  var values = [];
  rows.forEach(function (r) { series.forEach(function (s) { if (r[s.column] !== null) values.push(r[s.column]); }); });
  if (level) values.push(level.value);
  if (!rows.length || !values.length) return;
  var x0 = rows[0][0], x1 = Math.max(rows[rows.length - 1][0], x0 + 1);
  var y0 = Math.min.apply(null, values), y1 = Math.max.apply(null, values);
  if (y1 === y0) y1 = y0 + 1;
  var plot = {
    ctx: ctx, width: width, height: height, pad: pad,
    X: function (x) { return pad.l + (x - x0) / (x1 - x0) * (width - pad.l - pad.r); },
    Y: function (y) { return height - pad.b - (y - y0) / (y1 - y0) * (height - pad.t - pad.b); }
  };
  drawAxes(plot, [y0, (y0 + y1) / 2, y1], x0, x1, rows[rows.length - 1][0]);
  if (level) drawLevel(plot, level);
  series.forEach(function (s, n) { drawSeries(plot, rows, s, n); });
}

/* the frame, three values up the side, the first and last steps along the bottom */
function drawAxes(plot, ticks, x0, x1, lastStep) {
  var ctx = plot.ctx, pad = plot.pad;
  ctx.strokeStyle = "#999";
  ctx.strokeRect(pad.l, pad.t, plot.width - pad.l - pad.r, plot.height - pad.t - pad.b);
  ctx.fillStyle = "#333";
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "right";
  ticks.forEach(function (y) { ctx.fillText(fmt(y, 3), pad.l - 4, plot.Y(y) + 4); });
  ctx.textAlign = "center";
  ctx.fillText("step " + x0, plot.X(x0) + 20, plot.height - 8);
  ctx.fillText("step " + lastStep, plot.X(x1) - 30, plot.height - 8);
}

function drawLevel(plot, level) {
  var ctx = plot.ctx, y = plot.Y(level.value);
  ctx.setLineDash([6, 4]);
  ctx.strokeStyle = "#6b7280";
  ctx.beginPath();
  ctx.moveTo(plot.pad.l, y);
  ctx.lineTo(plot.width - plot.pad.r, y);
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.textAlign = "left";
  ctx.fillText(level.name, plot.pad.l + 6, y - 4);
}

/* series s (the n-th) as a line through its values (and dots), its name at the top right */
function drawSeries(plot, rows, s, n) {
  var ctx = plot.ctx, started = false;
  ctx.strokeStyle = ctx.fillStyle = s.color;
  ctx.lineWidth = s.dots ? 2 : 1;
  ctx.beginPath();
  rows.forEach(function (r) {
    if (r[s.column] === null) return;
    var x = plot.X(r[0]), y = plot.Y(r[s.column]);
    if (started) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    started = true;
    if (s.dots) ctx.fillRect(x - 2, y - 2, 4, 4);
  });
  ctx.stroke();
  ctx.textAlign = "right";
  ctx.fillText(s.name, plot.width - plot.pad.r - 6, plot.pad.t + 14 + 14 * n);
}
