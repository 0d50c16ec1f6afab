/* numforge studio: the page's one script, for the studio (answers from the server's API) and for the page
   numforge inspect writes (the same answers, embedded). It draws what the study functions computed and
   computes nothing about the model itself. Every string from a prompt or a tokenizer is inserted as text
   (textContent, createTextNode), never as HTML. */
(function () {
  "use strict";

  /* ------------------------------------------------------------------ where answers come from */

  var embedded = document.getElementById("data");
  var STATIC = embedded ? JSON.parse(embedded.textContent) : null;
  var TOKEN = new URLSearchParams(location.search).get("token") || "";

  function api(route, body) {
    if (STATIC) return staticAnswer(route, body || {});
    var init = { method: body ? "POST" : "GET", headers: { "X-Numforge-Token": TOKEN } };
    if (body) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(route, init).then(function (response) {
      return response.json().then(function (data) {
        if (!response.ok) throw new Error(data.error || "error " + response.status);
        return data;
      });
    });
  }

  function staticAnswer(route, body) {
    var a = STATIC.answers;
    if (route === "/api/model") return Promise.resolve(STATIC.model);
    if (route === "/api/tokenize") return Promise.resolve(a.tokenize);
    if (route === "/api/next") return Promise.resolve(a.next);
    if (route === "/api/lens") return Promise.resolve(a.lens);
    if (route === "/api/attention") {
      var layer = body.layer || 0;
      if (layer >= a.attention.length) {
        return Promise.reject(new Error("this page holds the attention weights of layers 0-" +
          (a.attention.length - 1) + " (numforge inspect --attention-mib): run numforge studio, or inspect with " +
          "a larger --attention-mib, for layer " + layer));
      }
      return Promise.resolve(Object.assign({}, a.attention[0], a.attention[layer]));
    }
    if (route === "/api/trace") {
      var position = body.position === undefined || body.position === null ? a.trace.position : body.position;
      var at = a.at[position], trace = Object.assign({}, a.trace, { position: position });
      trace.forward = a.trace.forward.map(function (s, n) { return Object.assign({}, s, { at: at.forward[n] }); });
      trace.backward = a.trace.backward.map(function (s, n) { return Object.assign({}, s, { at: at.backward[n] }); });
      return Promise.resolve(trace);
    }
    return Promise.reject(new Error("this page was written by numforge inspect: run numforge studio for this view"));
  }

  /* ------------------------------------------------------------------ small helpers */

  function $(id) { return document.getElementById(id); }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  function fmt(v, digits) {
    if (v === null || v === undefined) return "";
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential((digits || 4) - 1);
    return v.toPrecision(digits || 4);
  }

  function row(table, cells, className) {
    var tr = el("tr", className);
    cells.forEach(function (c) {
      var td = typeof c === "object" && c !== null && c.nodeType ? c : el("td", null, c);
      if (!td.className && typeof c === "string" && !/^-?[\d.e+-]+$/.test(c)) td.className = "t";
      tr.appendChild(td);
    });
    table.appendChild(tr);
    return tr;
  }

  function head(table, names) {
    var tr = el("tr");
    names.forEach(function (n, i) { tr.appendChild(el("th", i === 0 ? "t" : null, n)); });
    table.appendChild(tr);
  }

  function cell(text, className) { return el("td", className, text); }

  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  var status = $("status");
  var busy = 0;
  function working(delta) {
    busy += delta;
    document.body.setAttribute("data-busy", String(busy));
  }
  function fail(error) {
    status.textContent = String(error.message || error);
    status.className = "error";
  }
  function ok() { status.textContent = ""; status.className = ""; }

  /* one request per view at a time that counts: an answer older than the view's last question is dropped;
     the same question again (back to a view) is drawn from the last answer, not asked twice */
  var asked = {}, last = {};
  function ask(view, route, body, draw, marker) {
    var n = (asked[view] = (asked[view] || 0) + 1), started = performance.now();
    var key = body === null ? null : route + " " + JSON.stringify(body);
    var answer = key !== null && last[view] && last[view].key === key ? Promise.resolve(last[view].data) : api(route, body);
    working(1);
    return answer.then(function (data) {
      if (n !== asked[view]) return;
      ok();
      last[view] = { key: key, data: data };
      draw(data);
      var section = marker || $("view-" + view);
      section.setAttribute("data-ms", String(Math.round(performance.now() - started)));  /* asked to drawn */
      section.setAttribute("data-ready", String(n));
    }).catch(function (error) {
      if (n === asked[view]) fail(error);
    }).then(function () { working(-1); });
  }

  /* ------------------------------------------------------------------ the tooltip */

  var tip = $("tip");
  function showTip(lines, x, y) {
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    var left = x + 14 + w > innerWidth - 4 ? Math.max(4, x - 14 - w) : x + 14;
    var top = y + 14 + h > innerHeight - 4 ? Math.max(4, y - 14 - h) : y + 14;
    tip.style.left = left + "px";
    tip.style.top = top + "px";
  }
  function hideTip() { tip.hidden = true; }

  /* ------------------------------------------------------------------ tokens as chips */

  function chip(shown, id, className) {
    var c = el("span", "tok" + (className ? " " + className : ""));
    c.appendChild(document.createTextNode(shown));
    if (id !== undefined) c.appendChild(el("small", null, id));
    return c;
  }

  /* tokens: [{id, shown, text, bytes}]; opts.selected, opts.onClick(i), opts.onHover(i or -1), opts.className(i) */
  function tokenStrip(container, tokens, opts) {
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

  /* ------------------------------------------------------------------ colours and their key */

  var VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  var BLUES = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  function ramp(stops, t) {
    var x = Math.max(0, Math.min(1, t)) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), f = x - i;
    var a = stops[i], b = stops[i + 1];
    return [a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2])];
  }

  function sharp(canvas, width, height) {
    var dpr = window.devicePixelRatio || 1;
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    canvas.width = Math.max(1, Math.round(width * dpr));
    canvas.height = Math.max(1, Math.round(height * dpr));
    var ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  }

  function drawKey(box, stops, low, high) {
    clear(box);
    var canvas = el("canvas"), ctx = sharp(canvas, 200, 12);
    for (var x = 0; x < 200; x++) {
      var c = ramp(stops, x / 199);
      ctx.fillStyle = "rgb(" + c.map(Math.round).join(",") + ")";
      ctx.fillRect(x, 0, 1, 12);
    }
    box.appendChild(el("span", null, low));
    box.appendChild(canvas);
    box.appendChild(el("span", null, high));
  }

  /* ------------------------------------------------------------------ a grid drawn only where it is seen */

  /* A rows x cols grid of cells in a scrolling box: only the visible cells are drawn, one pixel per cell into an
     image that is then scaled, so a 1024 x 1024 matrix costs what the screen shows. o: rows, cols, cellW, cellH,
     left, top (margins for the labels), rgb(i, j) -> [r, g, b] or null (not drawn), rowLabel(i), colLabel(j),
     cellText(i, j) (optional), onHover(i, j, event) with -1 outside, mark {row, col} (outlined). */
  function Grid(box, o) {
    clear(box);
    var sizer = el("div", "sizer"), canvas = el("canvas"), off = document.createElement("canvas");
    sizer.style.width = o.left + o.cols * o.cellW + "px";
    sizer.style.height = o.top + o.rows * o.cellH + "px";
    sizer.appendChild(canvas);
    box.appendChild(sizer);
    box.setAttribute("data-geometry", JSON.stringify({ left: o.left, top: o.top, cellW: o.cellW, cellH: o.cellH }));
    var grid = { mark: o.mark || { row: -1, col: -1 }, options: o, canvas: canvas };
    var pending = false;

    function draw() {
      pending = false;
      var W = Math.min(box.clientWidth, o.left + o.cols * o.cellW), H = Math.min(box.clientHeight, o.top + o.rows * o.cellH);
      if (W <= 0 || H <= 0) return;
      var ctx = sharp(canvas, W, H), sx = box.scrollLeft, sy = box.scrollTop;
      var j0 = Math.max(0, Math.floor(sx / o.cellW)), j1 = Math.min(o.cols, Math.ceil((sx + W - o.left) / o.cellW));
      var i0 = Math.max(0, Math.floor(sy / o.cellH)), i1 = Math.min(o.rows, Math.ceil((sy + H - o.top) / o.cellH));
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, W, H);
      var nx = j1 - j0, ny = i1 - i0;
      if (nx > 0 && ny > 0) {
        off.width = nx;
        off.height = ny;
        var octx = off.getContext("2d"), image = octx.createImageData(nx, ny), px = image.data;
        for (var i = i0; i < i1; i++) {
          for (var j = j0; j < j1; j++) {
            var c = o.rgb(i, j);
            if (c === null) continue;
            var k = ((i - i0) * nx + (j - j0)) * 4;
            px[k] = c[0]; px[k + 1] = c[1]; px[k + 2] = c[2]; px[k + 3] = 255;
          }
        }
        octx.putImageData(image, 0, 0);
        ctx.save();
        ctx.beginPath();
        ctx.rect(o.left, o.top, W - o.left, H - o.top);
        ctx.clip();
        ctx.imageSmoothingEnabled = false;
        ctx.drawImage(off, o.left + j0 * o.cellW - sx, o.top + i0 * o.cellH - sy, nx * o.cellW, ny * o.cellH);
        if (o.cellText && o.cellW >= 26 && o.cellH >= 13) {
          ctx.font = "11px ui-monospace, monospace";
          ctx.textBaseline = "middle";
          for (i = i0; i < i1; i++) {
            for (j = j0; j < j1; j++) {
              var t = o.cellText(i, j);
              if (t === null) continue;
              ctx.fillStyle = t.color || "#000";
              ctx.fillText(fit(ctx, t.text, o.cellW - 4), o.left + j * o.cellW - sx + 2, o.top + (i + 0.5) * o.cellH - sy);
            }
          }
        }
        ctx.strokeStyle = "#e11d48";
        ctx.lineWidth = 1.5;
        if (grid.mark.row >= 0) ctx.strokeRect(o.left - sx, o.top + grid.mark.row * o.cellH - sy, o.cols * o.cellW, o.cellH);
        if (grid.mark.col >= 0) ctx.strokeRect(o.left + grid.mark.col * o.cellW - sx, o.top - sy, o.cellW, o.rows * o.cellH);
        ctx.restore();
      }
      ctx.fillStyle = "#333";
      ctx.font = "11px ui-monospace, monospace";
      if (o.left > 0 && o.cellH >= 9) {
        ctx.textAlign = "right";
        ctx.textBaseline = "middle";
        for (i = i0; i < i1; i++) {
          var y = o.top + (i + 0.5) * o.cellH - sy;
          if (y > o.top - 4) {
            ctx.fillStyle = i === grid.mark.row ? "#e11d48" : "#333";
            ctx.fillText(fit(ctx, o.rowLabel(i), o.left - 6), o.left - 4, y);
          }
        }
      }
      if (o.top > 0 && o.cellW >= 9) {
        ctx.textAlign = "left";
        ctx.textBaseline = "middle";
        for (j = j0; j < j1; j++) {
          var x = o.left + (j + 0.5) * o.cellW - sx;
          if (x < o.left - 4) continue;
          ctx.save();
          ctx.translate(x, o.top - 4);
          ctx.rotate(-Math.PI / 2);
          ctx.fillStyle = j === grid.mark.col ? "#e11d48" : "#333";
          ctx.fillText(fit(ctx, o.colLabel(j), o.top - 6), 0, 0);
          ctx.restore();
        }
      }
    }

    grid.draw = function () {
      if (!pending) { pending = true; requestAnimationFrame(draw); }
    };
    grid.drawNow = draw;
    grid.setMark = function (r, c) { grid.mark = { row: r, col: c }; grid.draw(); };
    /* the cell under a pointer event: [i, j], -1 where outside */
    grid.at = function (e) {
      var box2 = box.getBoundingClientRect();
      var x = e.clientX - box2.left - o.left + box.scrollLeft, y = e.clientY - box2.top - o.top + box.scrollTop;
      var i = Math.floor(y / o.cellH), j = Math.floor(x / o.cellW);
      var inside = e.clientX - box2.left >= o.left && e.clientY - box2.top >= o.top;
      return inside && i >= 0 && j >= 0 && i < o.rows && j < o.cols ? [i, j] : [-1, -1];
    };
    function hover(e) { var ij = grid.at(e); if (o.onHover) o.onHover(ij[0], ij[1], e); }
    box.onpointermove = hover;
    box.onpointerdown = hover;
    box.onpointerleave = function (e) {  /* a finger leaves at the end of every tap: keep what the tap showed */
      if (o.onHover && e.pointerType !== "touch") o.onHover(-1, -1, e);
    };
    box.onscroll = grid.draw;
    draw();
    return grid;
  }

  function fit(ctx, text, width) {
    if (ctx.measureText(text).width <= width) return text;
    var s = text;
    while (s.length > 1 && ctx.measureText(s + "\u2026").width > width) s = s.slice(0, -1);
    return s + "\u2026";
  }

  window.addEventListener("resize", function () { redraws.forEach(function (f) { f(); }); });
  var redraws = [];

  /* ------------------------------------------------------------------ state and navigation */

  var promptBox = $("prompt");
  var state = { view: "next", ids: null, promptLength: 0, position: null, layer: 0, head: 0, model: null };
  var VIEWS = {};

  function promptBody(extra) {
    var body = state.ids ? { ids: state.ids } : { text: promptBox.value };
    for (var key in extra || {}) body[key] = extra[key];
    return body;
  }

  function show(view) {
    state.view = view;
    document.querySelectorAll("#tabs button").forEach(function (b) {
      b.setAttribute("aria-selected", String(b.getAttribute("data-view") === view));
    });
    document.querySelectorAll(".view").forEach(function (s) { s.hidden = s.id !== "view-" + view; });
    if (!STATIC) history.replaceState(null, "", location.pathname + location.search + "#" + view);
    hideTip();
    VIEWS[view].load();
  }

  var typing = null;
  promptBox.addEventListener("input", function () {
    clearTimeout(typing);
    typing = setTimeout(function () {
      state.ids = null;
      state.position = null;
      VIEWS[state.view].load();
    }, 250);
  });

  /* ------------------------------------------------------------------ Tokenizer */

  VIEWS.tokenizer = {
    data: null,
    load: function () {
      ask("tokenizer", "/api/tokenize", { text: promptBox.value }, function (d) {
        VIEWS.tokenizer.data = d;
        var ranks = [];
        d.chunks.forEach(function (c) { c.merges.forEach(function (m) { ranks.push(m.rank); }); });
        ranks = ranks.filter(function (r, i, all) { return all.indexOf(r) === i; }).sort(function (a, b) { return a - b; });
        VIEWS.tokenizer.ranks = ranks;
        $("tok-summary").textContent = d.characters + " characters, " + d.bytes + " bytes, " + d.chunks.length +
          " chunks \u2192 " + d.tokens.length + " tokens";
        tokenStrip($("tok-tokens"), d.tokens);
        var slider = $("tok-step");
        slider.max = String(ranks.length);
        slider.value = String(ranks.length);
        VIEWS.tokenizer.drawChunks();
      });
    },
    drawChunks: function () {
      var d = this.data, ranks = this.ranks, step = Number($("tok-step").value), box = clear($("tok-chunks"));
      var upTo = step === 0 ? -1 : ranks[step - 1];
      $("tok-step-info").textContent = step === 0 ? "0 of " + ranks.length + ": every chunk as its bytes" :
        step + " of " + ranks.length + ": merges up to rank " + upTo + " applied";
      var label = function (id) { return d.labels[String(id)]; };
      d.chunks.forEach(function (c, n) {
        var div = el("div", "chunk"), line = el("div", "line");
        line.appendChild(el("span", "what", "chunk " + (n + 1)));
        line.appendChild(el("code", null, c.shown));
        line.appendChild(el("span", "what", c.special ? "special, whole" : plural(c.start.length, "byte") +
          (c.whole ? ", a token whole (no merges) \u2192" : " \u2192")));
        var ids = c.whole ? c.ids : c.start, now = null;
        c.merges.forEach(function (m) { if (m.rank <= upTo) ids = m.ids; if (m.rank === upTo) now = m; });
        ids.forEach(function (id) {
          line.appendChild(chip(label(id), id, c.special ? "special" : now && id === now.id ? "merged" : ""));
        });
        div.appendChild(line);
        if (c.merges.length) {
          var details = el("details"), list = el("ol");
          details.appendChild(el("summary", null, plural(c.merges.length, "merge") + ", in rank order"));
          c.merges.forEach(function (m) {
            list.appendChild(el("li", null, "rank " + m.rank + ": [" + label(m.pair[0]) + "] + [" + label(m.pair[1]) +
              "] \u2192 id " + m.id));
          });
          details.appendChild(list);
          div.appendChild(details);
        }
        box.appendChild(div);
      });
    }
  };
  $("tok-step").addEventListener("input", function () { if (VIEWS.tokenizer.data) VIEWS.tokenizer.drawChunks(); });

  /* ------------------------------------------------------------------ Next token */

  function settings() {
    var k = $("next-top-k").value, p = $("next-top-p").value;
    return {
      temperature: Number($("next-temperature").value),
      top_k: k === "" ? null : Number(k),
      top_p: p === "" ? null : Number(p),
      greedy: document.querySelector('input[name="next-choice"]:checked').value === "greedy",
      seed: Number($("next-seed").value || 0)
    };
  }

  VIEWS.next = {
    tokens: null,
    answer: null,
    load: function () {
      $("next-temperature-value").textContent = Number($("next-temperature").value).toFixed(2);
      ask("next", "/api/next", promptBody(Object.assign({ position: state.position }, settings())), function (d) {
        VIEWS.next.answer = d;
        VIEWS.next.draw(d);
      });
    },
    draw: function (d) {
      var tokens = d.tokens;
      this.tokens = tokens;
      if (!state.ids) state.promptLength = tokens.length;
      else promptBox.value = d.text;  /* the prompt and what was generated, decoded */
      tokenStrip($("next-tokens"), tokens, {
        selected: d.position,
        onClick: function (i) { state.position = i === tokens.length - 1 ? null : i; VIEWS.next.load(); },
        className: function (i) { return i >= state.promptLength ? "new" : ""; }
      });
      var label = function (id) { return d.labels[String(id)]; };
      $("next-h-eq").textContent = "h = the final norm's output at position " + d.position + ", read from " + d.hidden.source;
      drawHidden($("next-hidden"), d.hidden.first);
      $("next-h-info").textContent = "\u2016h\u2016 = " + fmt(d.hidden.norm) + "; " + d.hidden.size + " values, the first " +
        d.hidden.first.length + " drawn (up: positive, down: negative)";
      $("next-z-info").textContent = d.vocab_size + " logits, from " + fmt(d.logits.min) + " to " + fmt(d.logits.max) +
        " (mean " + fmt(d.logits.mean) + ", std " + fmt(d.logits.std) + "); " + d.logits.source;
      $("next-kept").textContent = (d.top_k || d.top_p ? "top-k / top-p keep " : "every token is kept: ") +
        d.kept_count + " tokens, holding " + fmt(d.kept_mass) + " of p";
      var table = clear($("next-table"));
      table.setAttribute("data-temperature", String(d.temperature));
      head(table, ["token", "id", "logit z", "p = softmax(z/\u03c4)", "", "q (kept)", ""]);
      var top = d.top[0][2];
      d.top.forEach(function (r) {
        var bar = el("span", "bar"), barQ = el("span", "bar q");
        bar.style.width = Math.round(120 * r[2] / top) + "px";
        barQ.style.width = Math.round(120 * r[3] / Math.max(top, d.top[0][3])) + "px";
        var tr = row(table, [cell(label(r[0]), "t"), String(r[0]), fmt(r[1]), fmt(r[2]), wrapCell(bar), fmt(r[3]), wrapCell(barQ)],
          r[0] === d.chosen.id ? "on" : "");
        tr.setAttribute("data-id", String(r[0]));
        tr.setAttribute("data-p", String(r[2]));
        tr.setAttribute("data-q", String(r[3]));
      });
      var chosen = clear($("next-chosen"));
      chosen.appendChild(document.createTextNode((d.greedy ? "greedy: argmax z = " : "sampled (seed " + d.seed + "): ")));
      chosen.appendChild(chip(d.chosen.shown, d.chosen.id, "on"));
      chosen.appendChild(document.createTextNode("  p = " + fmt(d.chosen.p) + ", q = " + fmt(d.chosen.q) + "; bytes " +
        (d.chosen.bytes || "(none)") + " \u2192 text \u201c" + d.chosen.text + "\u201d"));
      if (d.target !== null) {
        chosen.appendChild(document.createTextNode("; the prompt's own next token here: "));
        chosen.appendChild(chip(label(d.target), d.target));
      }
      chosen.setAttribute("data-chosen", String(d.chosen.id));
      var generated = tokens.slice(state.promptLength);
      tokenStrip($("next-generated"), generated);
      var full = tokens.length >= state.model.context;
      $("next-step").disabled = full || STATIC !== null;
      $("next-generate").disabled = full || STATIC !== null;
      $("next-reset").disabled = !state.ids;
    }
  };

  function wrapCell(node) { var td = el("td", "t"); td.appendChild(node); return td; }

  function drawHidden(canvas, values) {
    var width = Math.min(640, canvas.parentNode.clientWidth - 24), ctx = sharp(canvas, width, 40);
    var big = Math.max.apply(null, values.map(Math.abs)) || 1, w = width / values.length;
    values.forEach(function (v, i) {
      ctx.fillStyle = v >= 0 ? "#2563eb" : "#dc2626";
      var h = 19 * Math.abs(v) / big;
      ctx.fillRect(i * w, v >= 0 ? 20 - h : 20, Math.max(1, w - 1), h);
    });
  }

  function currentIds() { return VIEWS.next.tokens.map(function (t) { return t.id; }); }

  $("next-step").addEventListener("click", function () {
    var d = VIEWS.next.answer;
    if (!d) return;
    var ids = currentIds().slice(0, d.position + 1);
    ids.push(d.chosen.id);
    state.ids = ids;
    state.position = null;
    VIEWS.next.load();
  });
  $("next-generate").addEventListener("click", function () {
    if (!VIEWS.next.tokens) return;
    var room = state.model.context - VIEWS.next.tokens.length;
    working(1);
    api("/api/generate", Object.assign({ ids: currentIds(), count: Math.min(10, room) }, settings())).then(function (g) {
      state.ids = currentIds().concat(g.ids);
      state.position = null;
      VIEWS.next.load();
    }).catch(fail).then(function () { working(-1); });
  });
  $("next-reset").addEventListener("click", function () { state.ids = null; state.position = null; VIEWS.next.load(); });
  ["next-temperature", "next-top-k", "next-top-p", "next-seed"].forEach(function (id) {
    var timer = null;
    $(id).addEventListener("input", function () {
      $("next-temperature-value").textContent = Number($("next-temperature").value).toFixed(2);
      clearTimeout(timer);
      timer = setTimeout(function () { VIEWS.next.load(); }, 120);
    });
  });
  document.querySelectorAll('input[name="next-choice"]').forEach(function (r) {
    r.addEventListener("change", function () { VIEWS.next.load(); });
  });

  /* ------------------------------------------------------------------ Attention */

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
  function Head(b64, T) {
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

  function scaled(headData, scale) {
    var hi = Math.log10(headData.big), lo = Math.min(headData.lowLog, hi - 1);
    return function (i, j) {
      var v = headData.w(i, j);
      if (v === null) return null;
      if (scale === "row") return v / (headData.rowMax[i] || 1);
      if (scale === "log") return v > 0 ? (Math.log10(v) - lo) / (hi - lo) : 0;
      return v / headData.big;
    };
  }

  function scaleKey(headData, scale) {
    if (scale === "row") return ["0", "each row's largest"];
    if (scale === "log") return ["1e" + Math.min(headData.lowLog, Math.floor(Math.log10(headData.big)) - 1), fmt(headData.big, 3)];
    return ["0", fmt(headData.big, 3)];
  }

  VIEWS.attention = {
    answer: null,
    heads: null,
    load: function () {
      var m = state.model, layerBox = $("att-layer"), headBox = $("att-head");
      if (!layerBox.options.length) {
        var held = STATIC ? STATIC.answers.attention.length : m.layers;  /* an inspector page holds layers 0..held-1 */
        for (var l = 0; l < m.layers; l++) {
          var option = layerBox.appendChild(el("option", null, l < held ? String(l) : l + " (numforge studio)"));
          option.value = String(l);
          option.disabled = l >= held;
        }
        for (var h = 0; h < m.heads; h++) headBox.appendChild(el("option", null, String(h)));
      }
      ask("attention", "/api/attention", promptBody({ layer: state.layer, heads: null }), function (d) {
        VIEWS.attention.answer = d;
        VIEWS.attention.heads = d.weights.map(function (b64) { return Head(b64, d.T); });
        VIEWS.attention.draw();
      });
    },
    draw: function () {
      var d = this.answer, T = d.T, scale = $("att-scale").value, self = this;
      var labels = d.tokens.map(function (t) { return t.shown; });
      $("att-note").textContent = "Layer " + d.layer + ", head " + state.head + ": rows are queries, columns keys; the " +
        "masked upper triangle is blank; hover a cell for its weight. The " + d.path + " path's weights" +
        (d.path === "tiled" ? " (rebuilt from its saved log-sum-exp, P = exp(S - L))" : " (kept in its cache)") +
        ", sent as float16 (about 3 significant digits).";
      tokenStrip($("att-tokens"), d.tokens, {
        onHover: function (i) { if (self.grid) self.grid.setMark(i, i); if (i >= 0) self.focus(i, -1); }
      });
      this.thumbs(scale);
      var headData = this.heads[state.head], value = scaled(headData, scale);
      var key = scaleKey(headData, scale);
      drawKey($("att-key"), VIRIDIS, key[0], key[1]);
      var box = $("att-main"), size = Number($("att-cell").value);
      var fitSize = Math.max(1, Math.min(32, Math.floor((box.parentNode.clientWidth - 100) / T)));
      var cellSize = size === 0 ? fitSize : size;
      if ($("att-draw").value === "lines") return this.lines(box, labels, value);
      var margin = cellSize >= 9 ? 90 : 0;
      this.grid = Grid(box, {
        rows: T, cols: T, cellW: cellSize, cellH: cellSize, left: margin, top: margin,
        rgb: function (i, j) { var v = value(i, j); return v === null ? null : ramp(VIRIDIS, v); },
        rowLabel: function (i) { return labels[i]; },
        colLabel: function (j) { return labels[j]; },
        onHover: function (i, j, e) {
          if (i < 0 || j > i) { hideTip(); self.grid.setMark(-1, -1); return; }
          self.grid.setMark(i, j);
          var w = headData.w(i, j);
          showTip(["layer " + d.layer + ", head " + state.head, "query " + i + " " + labels[i], "key   " + j + " " + labels[j],
            "weight " + w.toPrecision(4)], e.clientX, e.clientY);
          box.setAttribute("data-hover", i + "," + j + "," + w);
          self.focus(i, j);
        }
      });
      redraws[0] = function () { self.draw(); };
    },
    focus: function (i, j) {
      var d = this.answer, p = d.predictions[i], label = function (id) { return d.labels[String(id)]; };
      var text = "query " + i + " " + d.tokens[i].shown + (j >= 0 ? ", key " + j + " " + d.tokens[j].shown : "") +
        "; the model's top predictions after position " + i + ": " +
        p.top.map(function (t) { return label(t[0]) + " " + fmt(t[1], 3); }).join(", ");
      $("att-focus").textContent = text;
    },
    thumbs: function (scale) {
      var box = clear($("att-thumbs")), d = this.answer, T = d.T, self = this;
      this.heads.forEach(function (headData, h) {
        var fig = el("figure", h === state.head ? "on" : ""), canvas = el("canvas"), ctx = sharp(canvas, 96, 96);
        var off = document.createElement("canvas");
        off.width = off.height = T;
        var octx = off.getContext("2d"), image = octx.createImageData(T, T), px = image.data, value = scaled(headData, scale);
        for (var i = 0; i < T; i++) {
          for (var j = 0; j <= i; j++) {
            var c = ramp(VIRIDIS, value(i, j)), k = (i * T + j) * 4;
            px[k] = c[0]; px[k + 1] = c[1]; px[k + 2] = c[2]; px[k + 3] = 255;
          }
        }
        octx.putImageData(image, 0, 0);
        ctx.imageSmoothingEnabled = T > 96;
        ctx.drawImage(off, 0, 0, 96, 96);
        fig.appendChild(canvas);
        fig.appendChild(el("figcaption", null, "head " + h));
        fig.addEventListener("click", function () { state.head = h; $("att-head").value = String(h); self.draw(); });
        box.appendChild(fig);
      });
    },
    lines: function (box, labels, value) {
      var T = labels.length, rowH = 18, width = Math.min(box.parentNode.clientWidth - 4, 720), self = this;
      var selected = -1;
      clear(box);
      var sizer = el("div", "sizer"), canvas = el("canvas");
      sizer.style.width = width + "px";
      sizer.style.height = T * rowH + "px";
      sizer.appendChild(canvas);
      box.appendChild(sizer);
      function draw() {
        var H = Math.min(box.clientHeight, T * rowH), ctx = sharp(canvas, width, H), sy = box.scrollTop;
        var i0 = Math.floor(sy / rowH), i1 = Math.min(T, Math.ceil((sy + H) / rowH)), xl = 150, xr = width - 150;
        ctx.font = "12px ui-monospace, monospace";
        ctx.textBaseline = "middle";
        for (var i = i0; i < i1; i++) {
          var y = (i + 0.5) * rowH - sy;
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
            ctx.moveTo(xl, (q + 0.5) * rowH - sy);
            ctx.lineTo(xr, (k + 0.5) * rowH - sy);
            ctx.stroke();
          }
        });
      }
      box.onscroll = draw;
      box.onpointermove = box.onpointerdown = function (e) {
        var i = Math.floor((e.clientY - box.getBoundingClientRect().top + box.scrollTop) / rowH);
        selected = i >= 0 && i < T ? i : -1;
        if (selected >= 0) self.focus(selected, -1);
        draw();
      };
      box.onpointerleave = function (e) { if (e.pointerType !== "touch") { selected = -1; draw(); } };
      this.grid = null;
      draw();
    }
  };
  $("att-layer").addEventListener("change", function () { state.layer = Number(this.value); VIEWS.attention.load(); });
  $("att-head").addEventListener("change", function () { state.head = Number(this.value); VIEWS.attention.draw(); });
  ["att-scale", "att-draw", "att-cell"].forEach(function (id) {
    $(id).addEventListener("input", function () { if (VIEWS.attention.answer) VIEWS.attention.draw(); });
  });

  /* ------------------------------------------------------------------ Forward and backward */

  VIEWS.trace = {
    load: function () {
      ask("trace", "/api/trace", promptBody({ position: state.position }), function (d) { VIEWS.trace.draw(d); });
    },
    draw: function (d) {
      var t = d.position, label = function (id) { return d.labels[String(id)]; };
      tokenStrip($("trace-tokens"), d.tokens, {
        selected: t,
        onClick: function (i) { state.position = i; VIEWS.trace.load(); }
      });
      $("trace-loss").textContent = d.loss === null ? "loss: none (one token: no target)" :
        "loss (mean cross-entropy of the " + (d.tokens.length - 1) + " next tokens): " + d.loss.toFixed(6);
      var atHead = "at position " + t + " (" + d.tokens[t].shown + "): \u2016\u00b7\u2016, first values";
      var table = clear($("trace-forward"));
      head(table, ["stage: its equation, the cache field it is read from", "shape", "mean", "std", "min", "max", atHead]);
      d.forward.forEach(function (s) {
        row(table, [stageCell(s.name, s.equation, "read from " + s.source), "(" + s.shape.join(",") + ")", fmt(s.mean),
          fmt(s.std), fmt(s.min), fmt(s.max), cell(atText(s.at), "t")]);
      });
      var pred = clear($("trace-predictions"));
      head(pred, ["pos", "token", "target (next token)", "p(target)", "loss", "top predictions"]);
      d.predictions.forEach(function (p, i) {
        var tr = row(pred, [String(i), cell(d.tokens[i].shown, "t"), cell(p.target === null ? "(none: the end)" : label(p.target), "t"),
          fmt(p.target_prob), fmt(p.loss),
          cell(p.top.map(function (q) { return label(q[0]) + " " + fmt(q[1], 3); }).join(", "), "t")], i === t ? "on" : "");
        tr.addEventListener("click", function () { state.position = i; VIEWS.trace.load(); });
      });
      if (t > 2) {
        var target = pred.rows[t + 1];
        if (target) pred.parentNode.scrollTop = target.offsetTop - 40;
      }
      ask("lens", "/api/lens", promptBody(), function (lens) { VIEWS.trace.lens(d, lens); }, $("trace-lens"));
      var back = clear($("trace-backward"));
      head(back, ["upstream gradient d loss / d ...: its equation", "shape", "norm", "mean", "std", "max |.|", atHead]);
      d.backward.forEach(function (s) {
        row(back, [stageCell(s.name, s.equation, null), "(" + s.shape.join(",") + ")", fmt(s.norm), fmt(s.mean, 3),
          fmt(s.std, 3), fmt(s.max_abs, 3), cell(atText(s.at), "t")]);
        s.params.forEach(function (p) {
          row(back, [cell("    param " + p[0], "t"), "(" + p[1].join(",") + ")", fmt(p[2]), "", "", "", ""], "param");
        });
      });
      if (!d.backward.length) row(back, [cell("a one-token prompt has no target: no loss, no backward", "t")]);
    },
    lens: function (d, lens) {
      var streams = lens.streams, T = d.tokens.length, top = lens.top, box = $("trace-lens");
      var label = function (id) { return lens.labels[String(id)]; };
      var grid = Grid(box, {
        rows: streams.length, cols: T, cellW: T > 200 ? 12 : 64, cellH: 22, left: 190, top: 70,
        rgb: function (i, j) { return ramp(BLUES, 0.85 * top[i][j][0][1]); },
        rowLabel: function (i) { return streams[i].name; },
        colLabel: function (j) { return j + " " + d.tokens[j].shown; },
        cellText: function (i, j) {
          var p = top[i][j][0][1];
          return { text: label(top[i][j][0][0]), color: p > 0.55 ? "#fff" : "#111" };
        },
        mark: { row: -1, col: d.position },
        onHover: function (i, j, e) {
          if (i < 0) { hideTip(); return; }
          showTip([streams[i].name + " (" + streams[i].source + ")", "position " + j + " " + d.tokens[j].shown].concat(
            top[i][j].map(function (q) { return "  " + label(q[0]) + "  " + fmt(q[1], 3); })), e.clientX, e.clientY);
        }
      });
      drawKey($("trace-lens-key"), BLUES, "p(top-1) 0", "1");
      redraws[1] = grid.draw;
    }
  };

  function stageCell(name, equation, source) {
    var td = el("td", "stage");
    td.appendChild(el("div", "name", name));
    if (equation) td.appendChild(el("div", "eq", equation));
    if (source) td.appendChild(el("div", "src", source));
    return td;
  }

  function atText(at) {
    if (!at) return "";
    if (at.length === 1) return fmt(at[0]) + "  (first values: in numforge studio)";
    return fmt(at[0]) + "  [" + at.slice(1).map(function (v) { return fmt(v); }).join(" ") + "]";
  }

  /* ------------------------------------------------------------------ Training */

  VIEWS.training = {
    timer: null,
    load: function () {
      clearTimeout(this.timer);
      ask("training", "/api/training", null, function (d) { VIEWS.training.draw(d); });
      if (!STATIC) this.timer = setTimeout(function () { if (state.view === "training") VIEWS.training.load(); }, 2000);
    },
    draw: function (d) {
      var info = $("train-info");
      if (d.run === null) {
        info.textContent = "No run to follow: start the studio with --checkpoint RUN_DIR (a run of numforge train) or " +
          "--run RUN_DIR, and this view draws its loss.csv as it grows.";
        return;
      }
      var rows = d.rows, last = rows[rows.length - 1];
      var lnV = d.sample ? d.sample.ln_vocab : null;
      info.textContent = "run " + d.run + ": " + rows.length + " steps logged" + (last ? ", the last step " + last[0] +
        " (train loss " + fmt(last[1]) + (last[2] === null ? "" : ", validation " + fmt(last[2])) + ", learning rate " +
        fmt(last[3], 3) + ")" : "") + (d.sample ? "; the latest checkpoint is step " + d.sample.step : "") + ".";
      $("train-loss").setAttribute("data-rows", String(rows.length));
      chart($("train-loss"), rows, [
        { column: 1, color: "#2563eb", name: "train (per step)" },
        { column: 2, color: "#ea580c", name: "validation", dots: true }
      ], lnV === null ? null : { value: lnV, name: "ln V = " + lnV.toFixed(2) + " (uniform guessing)" });
      chart($("train-lr"), rows, [{ column: 3, color: "#059669", name: "learning rate" }], null);
      $("train-sample").textContent = d.sample ? "step " + d.sample.step + " (temperature " + d.sample.temperature +
        ", seed " + d.sample.seed + "):\n" + d.sample.text : "(no checkpoint yet)";
    }
  };

  /* a line chart of rows' columns against their step (column 0) */
  function chart(canvas, rows, series, level) {
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
    var X = function (x) { return pad.l + (x - x0) / (x1 - x0) * (width - pad.l - pad.r); };
    var Y = function (y) { return height - pad.b - (y - y0) / (y1 - y0) * (height - pad.t - pad.b); };
    ctx.strokeStyle = "#999";
    ctx.strokeRect(pad.l, pad.t, width - pad.l - pad.r, height - pad.t - pad.b);
    ctx.fillStyle = "#333";
    ctx.font = "11px system-ui, sans-serif";
    ctx.textAlign = "right";
    [y0, (y0 + y1) / 2, y1].forEach(function (y) { ctx.fillText(fmt(y, 3), pad.l - 4, Y(y) + 4); });
    ctx.textAlign = "center";
    ctx.fillText("step " + x0, X(x0) + 20, height - 8);
    ctx.fillText("step " + rows[rows.length - 1][0], X(x1) - 30, height - 8);
    if (level) {
      ctx.setLineDash([6, 4]);
      ctx.strokeStyle = "#6b7280";
      ctx.beginPath();
      ctx.moveTo(pad.l, Y(level.value));
      ctx.lineTo(width - pad.r, Y(level.value));
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.textAlign = "left";
      ctx.fillText(level.name, pad.l + 6, Y(level.value) - 4);
    }
    series.forEach(function (s, n) {
      ctx.strokeStyle = ctx.fillStyle = s.color;
      ctx.lineWidth = s.dots ? 2 : 1;
      ctx.beginPath();
      var started = false;
      rows.forEach(function (r) {
        if (r[s.column] === null) return;
        var x = X(r[0]), y = Y(r[s.column]);
        if (started) ctx.lineTo(x, y); else ctx.moveTo(x, y);
        started = true;
        if (s.dots) ctx.fillRect(x - 2, y - 2, 4, 4);
      });
      ctx.stroke();
      ctx.textAlign = "right";
      ctx.fillText(s.name, width - pad.r - 6, pad.t + 14 + 14 * n);
    });
  }

  /* ------------------------------------------------------------------ start */

  document.querySelectorAll("#tabs button").forEach(function (b) {
    b.addEventListener("click", function () { show(b.getAttribute("data-view")); });
  });
  document.addEventListener("scroll", hideTip, true);
  window.addEventListener("hashchange", function () {
    var wanted = location.hash.slice(1);
    if (VIEWS[wanted] && wanted !== state.view && state.model) show(wanted);
  });

  api("/api/model").then(function (m) {
    state.model = m;
    $("model").textContent = m.source || m.description;
    if (STATIC) {
      $("mode").textContent = "inspect";
      promptBox.value = STATIC.prompt;
      promptBox.readOnly = true;
      $("prompt-info").textContent = "(numforge inspect wrote this page for this prompt; numforge studio takes any)";
      ["training"].forEach(function (v) { document.querySelector('#tabs [data-view="' + v + '"]').disabled = true; });
      ["next-temperature", "next-top-k", "next-top-p", "next-seed"].forEach(function (id) { $(id).disabled = true; });
      document.querySelectorAll('input[name="next-choice"]').forEach(function (r) { r.disabled = true; });
    } else {
      $("prompt-info").textContent = "up to " + m.context + " tokens (the model's context).";
    }
    var wanted = location.hash.slice(1);
    show(VIEWS[wanted] && !(STATIC && wanted === "training") ? wanted : STATIC ? "trace" : "next");
  }).catch(fail);
})();
