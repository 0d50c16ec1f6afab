/* Where answers come from: the studio's server (its JSON routes, with the page's token), or, on the page
   numforge inspect writes, the answers embedded in it (the JSON of its element #data). */

const embedded = document.getElementById("data");
export const STATIC = embedded ? JSON.parse(embedded.textContent) : null;
const TOKEN = new URLSearchParams(location.search).get("token") || "";

/* route's answer (a promise): a GET without a body, a POST of body as JSON */
export function api(route, body) {
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
