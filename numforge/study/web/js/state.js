/* What every view shares: the prompt box and the page's state. */

import { $ } from "./dom.js";

export const promptBox = $("prompt");

/* view: the view shown; ids: the tokens when stepped or generated past the typed prompt (null: the prompt's
   own), promptLength: how many of them the prompt holds; position: the position followed (null: the last);
   layer, head: attention's; model: /api/model's answer */
export const state = { view: "next", ids: null, promptLength: 0, position: null, layer: 0, head: 0, model: null };

/* a request's body: the prompt (its ids, or the text typed) and extra's fields */
export function promptBody(extra) {
  var body = state.ids ? { ids: state.ids } : { text: promptBox.value };
  for (var key in extra || {}) body[key] = extra[key];
  return body;
}
