/* Small DOM helpers. Every string from a prompt or a tokenizer is inserted as text (textContent,
   createTextNode), never as HTML. */

export function $(id) { return document.getElementById(id); }

export function el(tag, className, text) {
  var node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

export function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

/* a number in 4 (or digits) significant digits; exponent form outside [1e-3, 1e5) */
export function fmt(v, digits) {
  if (v === null || v === undefined) return "";
  var a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential((digits || 4) - 1);
  return v.toPrecision(digits || 4);
}

/* a table row of cells: a node as it is, anything else as a cell's text (class "t" for text, not numbers) */
export function row(table, cells, className) {
  var tr = el("tr", className);
  cells.forEach(function (c) {
    var td = typeof c === "object" && c !== null && c.nodeType ? c : el("td", null, c);
    if (!td.className && typeof c === "string" && !/^-?[\d.e+-]+$/.test(c)) td.className = "t";
    tr.appendChild(td);
  });
  table.appendChild(tr);
  return tr;
}

export function head(table, names) {
  var tr = el("tr");
  names.forEach(function (n, i) { tr.appendChild(el("th", i === 0 ? "t" : null, n)); });
  table.appendChild(tr);
}

export function cell(text, className) { return el("td", className, text); }

export function wrapCell(node) { var td = el("td", "t"); td.appendChild(node); return td; }

export function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }
