/* The Chat view: a conversation with the model, as numforge chat holds it. /api/chat streams ChatSession's turn
   as lines of JSON (notices, then the reply's pieces, then done), read here as they arrive and drawn piece by
   piece; Stop (or Escape, or leaving the view) aborts the request, and the server keeps the reply so far. "New
   conversation" is numforge chat's /reset, with the system message typed. The section's data-ready counts what
   was drawn (the history, a reset, a turn's end or refusal), data-state says replying, stopping or resetting
   (empty: idle), and data-pieces counts the pieces of the reply under way. */

import { api, respond } from "./api.js";
import { fail } from "./ask.js";
import { $, clear, el } from "./dom.js";

/* where a refusal of each chat field is shown, and the control it marks invalid */
const CHAT_FIELDS = {
  chat: ["chat-message-error", "chat-message"],
  chat_temperature: ["chat-temperature-error", "chat-temperature"],
  chat_max_tokens: ["chat-max-tokens-error", "chat-max-tokens"],
  chat_system: ["chat-system-error", "chat-system"]
};
const ROLES = { system: "System message", user: "You", assistant: "Model" };
const CHAT_STATES = {
  replying: "The model is replying\u2026 (Stop, or Escape in the message box, ends the reply where it is)",
  stopping: "Stopping: the server ends the reply and keeps what it sampled\u2026",
  resetting: "Starting a new conversation\u2026"
};
const chatSection = $("view-chat");

export const chatView = {
  turn: null,  /* the reply under way: { control: its AbortController, text: its text node, pieces, done, stopping } */
  limits: null,  /* the history's context and max_new_tokens */
  load: function () {
    if (!this.turn) api("/api/chat/history").then(chatHistory).catch(fail);
  },
  leave: function () { chatStop(); }
};

function chatDrawn() {
  chatSection.setAttribute("data-ready", String(Number(chatSection.getAttribute("data-ready") || 0) + 1));
}

/* the conversation as the server holds it, or why there is none */
function chatHistory(h) {
  $("chat-none").hidden = h.available;
  $("chat-on").hidden = !h.available;
  if (h.available) {
    chatView.limits = h;
    $("chat-max-tokens").max = String(h.max_new_tokens);
    chatMessages(h.messages);
    chatInfo(h.cached);
  } else {
    $("chat-why").textContent = "No chat with this model: " + h.why + ".";
  }
  chatDrawn();
}

function chatMessages(messages) {
  var list = clear($("chat-messages"));
  messages.forEach(function (m) { list.appendChild(chatMessage(m.role, m.content)); });
  if (!messages.length) list.appendChild(el("li", "chat-empty", "No message yet: type one below."));
  $("chat-log").scrollTop = $("chat-log").scrollHeight;
}

function chatMessage(role, text) {
  var item = el("li", "chat-msg " + role);
  item.appendChild(el("span", "chat-who", ROLES[role] || role));
  item.appendChild(el("div", "chat-text", text));
  return item;
}

function chatInfo(cached) {
  var h = chatView.limits;
  $("chat-info").textContent = "The KV cache holds " + cached + " of its " + h.context + " positions (the " +
    "conversation as the template renders it). A reply takes at most " + h.max_new_tokens + " tokens; when a new " +
    "message would leave too little room for one, the oldest turns are dropped, and the page says so.";
}

/* the view's state: "" (idle), or one of CHAT_STATES; Send and New conversation wait while it is not idle */
function chatBusy(state) {
  chatSection.setAttribute("data-state", state);
  $("chat-send").disabled = state !== "";
  $("chat-reset").disabled = state !== "";
  $("chat-stop").disabled = state !== "replying";
  $("chat-log").setAttribute("aria-busy", String(state === "replying"));
  $("chat-state").textContent = CHAT_STATES[state] || "";
  $("chat-state").className = "";
}

function chatClear() {
  for (var field in CHAT_FIELDS) {
    $(CHAT_FIELDS[field][0]).textContent = "";
    $(CHAT_FIELDS[field][0]).hidden = true;
    $(CHAT_FIELDS[field][1]).removeAttribute("aria-invalid");
  }
}

/* a refusal by the control at fault, anything else on the view's state line */
function chatFail(error) {
  var where = CHAT_FIELDS[error.field];
  if (!where) {
    $("chat-state").textContent = String(error.message || error);
    $("chat-state").className = "error";
    return;
  }
  $(where[0]).textContent = String(error.message || error);
  $(where[0]).hidden = false;
  $(where[1]).setAttribute("aria-invalid", "true");
}

function chatRefused(field, message) {
  var error = new Error(message);
  error.field = field;
  throw error;
}

/* the request's body; an empty or unreadable number is refused here (the server checks the rest) */
function chatBody() {
  var t = $("chat-temperature").value, m = $("chat-max-tokens").value;
  if (t === "" || !isFinite(Number(t))) {
    chatRefused("chat_temperature", "Type a temperature: a number from 0 (greedy) to 100 (numforge chat's default " +
      "is 0.8).");
  }
  if (m === "" || !isFinite(Number(m))) {
    chatRefused("chat_max_tokens", "Type the most tokens a reply may take: a whole number from 1 to " +
      chatView.limits.max_new_tokens + ".");
  }
  return { text: $("chat-message").value, temperature: Number(t), max_tokens: Number(m) };
}

/* call onLine with each line of the response's body as it arrives, each a JSON object */
function chatLines(response, onLine) {
  var reader = response.body.getReader(), decoder = new TextDecoder(), rest = "";
  function pump() {
    return reader.read().then(function (chunk) {
      rest += chunk.done ? decoder.decode() : decoder.decode(chunk.value, { stream: true });
      var lines = rest.split("\n");
      rest = chunk.done ? "" : lines.pop();
      lines.forEach(function (line) { if (line.trim()) onLine(JSON.parse(line)); });
      return chunk.done ? null : pump();
    });
  }
  return pump();
}

function chatLine(turn, line) {
  if ("notice" in line) $("chat-notices").appendChild(el("li", null, line.notice));
  else if ("piece" in line) {
    turn.text.appendData(line.piece);
    turn.pieces += 1;
    chatSection.setAttribute("data-pieces", String(turn.pieces));
    $("chat-log").scrollTop = $("chat-log").scrollHeight;
  } else if (line.done) turn.done = line;
  else if ("error" in line) throw new Error(line.error);
}

/* the message and the reply under way, in the log: the reply's text node grows with each piece */
function chatOpen(turn, text) {
  var list = $("chat-messages"), empty = list.querySelector(".chat-empty"), reply = chatMessage("assistant", "");
  if (empty) list.removeChild(empty);
  list.appendChild(chatMessage("user", text));
  reply.classList.add("streaming");
  turn.text = reply.lastChild.appendChild(document.createTextNode(""));
  list.appendChild(reply);
}

function chatSend() {
  if (chatView.turn) return;
  chatClear();
  var body;
  try { body = chatBody(); } catch (error) { chatFail(error); chatDrawn(); return; }
  var turn = { control: new AbortController(), text: null, pieces: 0, done: null, stopping: false };
  chatView.turn = turn;
  chatSection.setAttribute("data-pieces", "0");
  chatBusy("replying");
  respond("/api/chat", body, turn.control.signal).then(function (response) {
    $("chat-message").value = "";
    clear($("chat-notices"));  /* the last turn's: this one's come first in its answer */
    chatOpen(turn, body.text);
    return chatLines(response, function (line) { chatLine(turn, line); });
  }).then(function () {
    if (!turn.done) throw new Error("The reply broke off before its end: has the studio's server stopped?");
    chatEnd(turn.done.messages, turn.done.cached, turn.done.stop);
  }).catch(function (error) {
    if (error.name === "AbortError") return chatStopped();
    chatView.turn = null;
    chatBusy("");
    chatFail(error);
    chatDrawn();
  });
}

/* the turn over: the conversation as the server holds it, the reply said to a screen reader in one piece */
function chatEnd(messages, cached, stop) {
  chatView.turn = null;
  chatMessages(messages);
  chatInfo(cached);
  var last = messages[messages.length - 1], why = stop === "end of turn" ? "" : " (stopped: " + stop + ")";
  if (last && last.role === "assistant") {
    if (why) $("chat-messages").lastChild.appendChild(el("span", "chat-stopped", why.trim()));
    $("chat-said").textContent = "The model replied: " + last.content + why;
  }
  chatBusy("");
  chatDrawn();
}

/* the request aborted: what the server kept (it stops sampling once it sees the client gone) */
function chatStopped() {
  chatBusy("stopping");
  api("/api/chat/history").then(function (h) {
    chatEnd(h.messages, h.cached, "by you; the conversation keeps the reply so far");
  }).catch(function (error) {
    chatView.turn = null;
    chatBusy("");
    chatFail(error);
    chatDrawn();
  });
}

function chatStop() {
  var turn = chatView.turn;
  if (!turn || turn.stopping) return;
  turn.stopping = true;
  turn.control.abort();
  $("chat-message").focus();
}

$("chat-form").addEventListener("submit", function (e) { e.preventDefault(); chatSend(); });
$("chat-message").addEventListener("keydown", function (e) {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    chatSend();
  } else if (e.key === "Escape") chatStop();
});
$("chat-stop").addEventListener("click", chatStop);
window.addEventListener("pagehide", chatStop);
$("chat-reset").addEventListener("click", function () {
  if (chatView.turn) return;
  chatClear();
  chatBusy("resetting");
  var system = $("chat-system").value;
  api("/api/chat/reset", { system: system }).then(function (h) {
    clear($("chat-notices"));
    $("chat-said").textContent = "A new conversation" + (system ? ", opened by the system message" : "") + ".";
    chatBusy("");
    chatHistory(h);
  }).catch(function (error) {
    chatBusy("");
    chatFail(error);
    chatDrawn();
  });
});
