/* Where answers come from: the studio's server (its JSON routes, with the page's token), or, on the page
   numforge inspect writes, the answers embedded in it (the JSON of its element #data). */

const embedded = document.getElementById("data");
export const STATIC = embedded ? JSON.parse(embedded.textContent) : null;
const TOKEN = new URLSearchParams(location.search).get("token") || "";
export const GONE = "The studio's server is not answering: it has stopped. Start numforge studio again and open " +
  "the URL it prints; this page asks nothing more until then.";
let gone = false;

/* whether the server stopped answering (a request failed to connect): then no request is sent any more */
export function serverGone() { return gone; }

/* route's answer (a promise): a GET without a body, a POST of body as JSON; signal (an AbortSignal, or
   undefined) cancels it. A refusal rejects with the server's message and the field at fault (error.field). */
export function api(route, body, signal) {
  if (STATIC) return staticAnswer(route, body || {});
  return respond(route, body, signal).then(function (response) { return response.json(); });
}

/* route's response (a promise), its body not read yet (a streamed answer is read as it comes); a refusal, the
   server gone and an abort reject as api's do */
export function respond(route, body, signal) {
  if (gone) return Promise.reject(new Error(GONE));
  var init = { method: body ? "POST" : "GET", headers: { "X-Numforge-Token": TOKEN }, signal: signal };
  if (body) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  return fetch(route, init).catch(function (error) {
    if (error.name === "AbortError") throw error;
    gone = true;
    document.body.setAttribute("data-server", "gone");
    throw new Error(GONE);
  }).then(function (response) {
    if (response.ok) return response;
    return response.json().then(function (data) {
      var refused = new Error(data.error || "error " + response.status);
      refused.field = data.field || null;
      throw refused;
    });
  });
}

function staticAnswer(route, body) {
  var a = STATIC.answers;
  if (route === "/api/model") return Promise.resolve(STATIC.model);
  if (route === "/api/tokenize") return Promise.resolve(a.tokenize);
  if (route === "/api/next") return Promise.resolve(a.next);
  if (route === "/api/lens") return Promise.resolve(a.lens);
  if (route === "/api/attention") return staticAttention(a.attention, body.layer || 0);
  if (route === "/api/trace") return Promise.resolve(staticTrace(a, body.position));
  return Promise.reject(new Error("this page was written by numforge inspect: run numforge studio for this view"));
}

/* layers: the layers the page holds, 0 first (with the tokens and predictions every layer shares) */
function staticAttention(layers, layer) {
  if (layer >= layers.length) {
    return Promise.reject(new Error("this page holds the attention weights of layers 0-" +
      (layers.length - 1) + " (numforge inspect --attention-mib): run numforge studio, or inspect with " +
      "a larger --attention-mib, for layer " + layer));
  }
  return Promise.resolve(Object.assign({}, layers[0], layers[layer]));
}

/* the trace at a position: the stages are the same, what each holds at the position is a.at[position] */
function staticTrace(a, position) {
  if (position === undefined || position === null) position = a.trace.position;
  var at = a.at[position], trace = Object.assign({}, a.trace, { position: position });
  trace.forward = a.trace.forward.map(function (s, n) { return Object.assign({}, s, { at: at.forward[n] }); });
  trace.backward = a.trace.backward.map(function (s, n) { return Object.assign({}, s, { at: at.backward[n] }); });
  return trace;
}
