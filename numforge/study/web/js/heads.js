/* One attention head's weights, as the server sends them: the lower triangle (j <= i) in float16, base64. */

import { fmt } from "./dom.js";

/* little-endian float16s in base64 -> a Float32Array */
function decodeHalf(b64) {
  var raw = atob(b64), n = raw.length / 2, out = new Float32Array(n);
  for (var k = 0; k < n; k++) {
    var h = raw.charCodeAt(2 * k) | (raw.charCodeAt(2 * k + 1) << 8);
    var e = (h >> 10) & 31, f = h & 1023, s = h & 32768 ? -1 : 1;
    out[k] = e === 0 ? s * f * Math.pow(2, -24) : e === 31 ? (f ? NaN : s * Infinity) : s * (1 + f / 1024) * Math.pow(2, e - 15);
  }
  return out;
}

/* one head's weights: w(i, j) for j <= i, else null; and what the colour scales need */
export function Head(b64, T) {
  var tri = decodeHalf(b64), rowMax = new Float32Array(T), big = 0, small = 1;
  for (var i = 0; i < T; i++) {
    for (var j = 0; j <= i; j++) {
      var v = tri[i * (i + 1) / 2 + j];
      if (v > rowMax[i]) rowMax[i] = v;
      if (v > 0 && v < small) small = v;
    }
    if (rowMax[i] > big) big = rowMax[i];
  }
  return {
    w: function (i, j) { return j <= i ? tri[i * (i + 1) / 2 + j] : null; },
    rowMax: rowMax, big: big || 1, lowLog: Math.max(-8, Math.floor(Math.log10(small)))
  };
}

/* (i, j) -> the weight on the scale, in [0, 1] (null above the diagonal): "linear" (0 to the largest), "row"
   (each row's largest = 1) or "log" */
export function scaled(headData, scale) {
  var hi = Math.log10(headData.big), lo = Math.min(headData.lowLog, hi - 1);
  return function (i, j) {
    var v = headData.w(i, j);
    if (v === null) return null;
    if (scale === "row") return v / (headData.rowMax[i] || 1);
    if (scale === "log") return v > 0 ? (Math.log10(v) - lo) / (hi - lo) : 0;
    return v / headData.big;
  };
}

/* the scale's two ends, as the colour key writes them */
export function scaleKey(headData, scale) {
  if (scale === "row") return ["0", "each row's largest"];
  if (scale === "log") return ["1e" + Math.min(headData.lowLog, Math.floor(Math.log10(headData.big)) - 1), fmt(headData.big, 3)];
  return ["0", fmt(headData.big, 3)];
}
