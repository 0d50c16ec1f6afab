/* A line chart of rows' columns against their step (column 0): the training view's loss and learning rate. */

import { describe } from "./alt.js";
import { fmt } from "./dom.js";
import { sharp } from "./draw.js";

/* series: [{column, color, name, dots}]; level: {value, name}, a dashed line (or null); yName: the y axis */
export function chart(canvas, rows, series, level, yName) {
  var width = Math.min(900, canvas.parentNode.clientWidth), height = canvas.classList.contains("small") ? 140 : 320;
  var ctx = sharp(canvas, width, height), pad = { l: 64, r: 12, t: 12, b: 34 };
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
  canvas.setAttribute("data-x-ticks", drawAxes(plot, y0, y1, x0, x1, yName).join(","));
  if (level) drawLevel(plot, level);
  series.forEach(function (s, n) { drawSeries(plot, rows, s, n); });
  describeChart(canvas, rows, series, yName);
}

/* the chart in words and, for at most 40 of its steps spread evenly, its numbers */
function describeChart(canvas, rows, series, yName) {
  var every = Math.max(1, Math.ceil(rows.length / 40)), picked = rows.filter(function (r, k) {
    return k % every === 0 || k === rows.length - 1;
  });
  describe(canvas, yName + " against the step, from step " + rows[0][0] + " to " + rows[rows.length - 1][0] + ": " +
    series.map(function (s) { return s.name; }).join(" and "), ["step"].concat(series.map(function (s) { return s.name; })),
    picked.map(function (r) { return [r[0]].concat(series.map(function (s) { return r[s.column] === null ? "" : fmt(r[s.column]); })); }));
}

/* round steps (1, 2 or 5 times a power of ten) from lo to hi, about count of them */
export function niceTicks(lo, hi, count) {
  var raw = (hi - lo) / count, power = Math.pow(10, Math.floor(Math.log10(raw))), ticks = [];
  var step = [1, 2, 5, 10].map(function (m) { return m * power; }).filter(function (s) { return s >= raw; })[0];
  for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

/* the frame, round values up the side (named by yName) and round steps along the bottom (returned), with grid
   lines */
function drawAxes(plot, y0, y1, x0, x1, yName) {
  var ctx = plot.ctx, pad = plot.pad, right = plot.width - pad.r, bottom = plot.height - pad.b;
  ctx.strokeStyle = "#999";
  ctx.strokeRect(pad.l, pad.t, right - pad.l, bottom - pad.t);
  ctx.fillStyle = "#333";
  ctx.font = "11px system-ui, sans-serif";
  ctx.strokeStyle = "#eee";
  ctx.textAlign = "right";
  niceTicks(y0, y1, plot.height > 200 ? 5 : 2).forEach(function (y) {
    ctx.fillText(fmt(y, 3), pad.l - 4, plot.Y(y) + 4);
    ctx.beginPath(); ctx.moveTo(pad.l + 1, plot.Y(y)); ctx.lineTo(right - 1, plot.Y(y)); ctx.stroke();
  });
  ctx.textAlign = "center";
  var steps = niceTicks(x0, x1, Math.max(2, Math.floor((right - pad.l) / 90)));
  steps.forEach(function (x) { ctx.fillText(String(x), plot.X(x), bottom + 14); });
  ctx.fillText("step", (pad.l + right) / 2, plot.height - 2);
  ctx.save();
  ctx.translate(12, (pad.t + bottom) / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.fillText(yName, 0, 0);
  ctx.restore();
  return steps;
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
