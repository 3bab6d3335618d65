// Sidekick's page: a client of the public REST API only (the same calls a frontend makes).
// No framework, no build step. Server text is always set as textContent, never parsed as HTML.
"use strict";

// ------------------------------------------------------------------------------------------ helpers
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function money(value, currency) {
  if (value === null || value === undefined) return "price n/a";
  return `${Number(value).toFixed(2)} ${currency || ""}`.trim();
}

function clock(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

function hhmm(minutes) {
  const m = Math.round(minutes);
  return `${String(Math.floor(m / 60)).padStart(2, "0")}:${String(m % 60).padStart(2, "0")}`;
}

function minutesOf(value) {
  const [h, m] = value.split(":").map(Number);
  return h * 60 + m;
}

class ApiError extends Error {
  constructor(status, message, retryAfter) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

// One REST call: JSON in, JSON out; any non-2xx becomes an ApiError carrying the server's own detail.
async function api(method, path, body) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : {"content-type": "application/json"},
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, "Cannot reach the server. Is it running?");
  }
  if (response.status === 204) return null;
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    let detail = data && data.detail;
    if (Array.isArray(detail)) detail = detail.map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
    const retry = response.headers.get("Retry-After");
    throw new ApiError(response.status, detail || `HTTP ${response.status}`, retry ? Number(retry) : null);
  }
  return data;
}

// How an error reads to a person; a 503 is "busy, try again" with a Retry button.
function errorBox(error, retry) {
  const busy = error.status === 503;
  const text = busy
    ? `The server cannot answer right now (busy, or a part of it is down)${error.retryAfter ? ` — try again in ${error.retryAfter} s` : " — try again in a moment"}.`
    : error.status === 0 ? error.message : `Error ${error.status}: ${error.message}`;
  const box = el("div", {class: busy ? "error busy" : "error", role: "alert"}, el("span", {text}));
  if (busy && retry) {
    box.append(" ", el("button", {type: "button", class: "secondary retry", text: "Retry", onclick: () => { box.remove(); retry(); }}));
  }
  if (busy) box.append(el("span", {class: "detail", text: ` (${error.message})`}));
  return box;
}

// The reply's status line: degraded badge with its reason, and the latency the server measured.
function statusLine(reply) {
  const line = el("p", {class: "status"});
  if (reply.degraded) {
    line.append(el("span", {class: "badge degraded", title: "The agent cut corners to answer in time or without a model",
      text: `degraded: ${reply.reason || "yes"}`}), " ");
  }
  if (typeof reply.latency_ms === "number") line.append(el("span", {class: "latency", text: `${Math.round(reply.latency_ms)} ms`}));
  return line;
}

function busy(button, on) {
  button.disabled = on;
  button.setAttribute("aria-busy", on ? "true" : "false");
}

// ------------------------------------------------------------------------------------------ tabs
const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
const loaded = new Set();

function select(tab, focus) {
  for (const t of tabs) {
    const on = t === tab;
    t.setAttribute("aria-selected", on ? "true" : "false");
    t.tabIndex = on ? 0 : -1;
    document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
  }
  if (focus) tab.focus();
  const name = tab.id.replace("tab-", "");
  if (history.replaceState) history.replaceState(null, "", `#${name}`);
  if (name === "livestream" && !loaded.has(name)) { loaded.add(name); loadStreams(); }
}

tabs.forEach((tab, i) => {
  tab.addEventListener("click", () => select(tab, false));
  tab.addEventListener("keydown", (e) => {
    const step = {ArrowRight: 1, ArrowLeft: -1}[e.key];
    if (step) { e.preventDefault(); select(tabs[(i + step + tabs.length) % tabs.length], true); }
    if (e.key === "Home") { e.preventDefault(); select(tabs[0], true); }
    if (e.key === "End") { e.preventDefault(); select(tabs[tabs.length - 1], true); }
  });
});

// ------------------------------------------------------------------------------------------ shopping
const shop = {sessionId: null};
const shopLog = document.getElementById("shop-log");
const shopForm = document.getElementById("shop-form");
const shopInput = document.getElementById("shop-input");
const shopSend = document.getElementById("shop-send");

function card(item) {
  const stock = item.in_stock ? el("span", {class: "stock in", text: "in stock"}) : el("span", {class: "stock out", text: "sold out"});
  const node = el("li", {class: "card", tabindex: 0, "data-item-id": item.item_id,
                         title: item.sid ? `SID ${item.sid}` : "no SID"},
    el("h3", {class: "title", text: item.title}),
    el("p", {class: "meta"}, el("span", {class: "price", text: money(item.price, item.currency)}), " · ", stock),
    el("p", {class: "category", text: (item.category || []).slice(-2).join(" › ")}),
    item.sid ? el("p", {class: "sid", text: item.sid}) : null,
  );
  node.append(el("button", {type: "button", class: "add", disabled: !item.in_stock,
    "aria-label": `Add ${item.title} to cart`, text: "Add to cart", onclick: () => addToCart(item.item_id)}));
  return node;
}

function renderCart(reply) {
  const lines = document.getElementById("cart-lines");
  lines.replaceChildren();
  const byId = Object.fromEntries((reply.items || []).map((i) => [i.item_id, i]));
  for (const [itemId, quantity] of Object.entries(reply.cart || {})) {
    const item = byId[itemId];
    const name = item ? item.title : itemId;
    lines.append(el("li", {class: "cart-line"},
      el("span", {text: `${quantity} × ${name}`}),
      el("span", {class: "price", text: item && item.price !== null ? money(item.price * quantity, item.currency) : ""}),
      el("button", {type: "button", class: "remove secondary", "aria-label": `Remove ${name} from cart`, text: "Remove",
        onclick: () => removeFromCart(itemId)})));
  }
  if (!lines.children.length) lines.append(el("li", {class: "empty", text: "Empty."}));
  document.getElementById("cart-total").textContent = Number(reply.total || 0).toFixed(2);
}

// A turn's reply carries the cart as ids (the agent may have changed it); the cards seen so far give the rest.
function refreshCart(cart) {
  const ids = Object.keys(cart || {});
  const items = ids.map((id) => shop.cards[id]).filter(Boolean);
  renderCart({cart: cart || {}, items, total: items.reduce((sum, i) => sum + (i.price || 0) * cart[i.item_id], 0)});
}
shop.cards = {};

async function addToCart(itemId) {
  if (!shop.sessionId) return;
  try {
    renderCart(await api("POST", `/v1/shopping/sessions/${encodeURIComponent(shop.sessionId)}/cart`, {item_id: itemId, quantity: 1}));
  } catch (e) {
    shopLog.append(el("li", {class: "msg system"}, errorBox(e, () => addToCart(itemId))));
  }
}

async function removeFromCart(itemId) {
  try {
    renderCart(await api("DELETE", `/v1/shopping/sessions/${encodeURIComponent(shop.sessionId)}/cart/${encodeURIComponent(itemId)}`));
  } catch (e) {
    shopLog.append(el("li", {class: "msg system"}, errorBox(e, () => removeFromCart(itemId))));
  }
}

function renderTurn(reply) {
  const msg = el("li", {class: "msg agent"}, el("p", {class: "text", text: reply.reply || "(no reply)"}), statusLine(reply));
  for (const item of [...(reply.items || []), ...(reply.bundles || []).flat()]) shop.cards[item.item_id] = item;
  if ((reply.items || []).length) msg.append(el("ul", {class: "cards", "aria-label": "Items"}, reply.items.map(card)));
  (reply.bundles || []).forEach((bundle, k) => {
    const total = bundle.reduce((s, i) => s + (i.price || 0), 0);
    msg.append(el("div", {class: "bundle"},
      el("h3", {text: `Bundle ${k + 1} · ${money(total, bundle[0] && bundle[0].currency)}`}),
      el("ul", {class: "cards", "aria-label": `Bundle ${k + 1}`}, bundle.map(card))));
  });
  shopLog.append(msg);
  refreshCart(reply.cart);
  msg.scrollIntoView({block: "nearest"});
}

async function sendShopping(text) {
  const budget = document.getElementById("shop-budget").value;
  const body = {message: text};
  if (budget) body.budget_ms = Number(budget);
  busy(shopSend, true);
  try {
    let reply;
    if (shop.sessionId) {
      try {
        reply = await api("POST", `/v1/shopping/sessions/${encodeURIComponent(shop.sessionId)}/turns`, body);
      } catch (e) {
        if (e.status !== 404) throw e;
        shop.sessionId = null;  // the session expired: start a new one with this message
      }
    }
    if (!reply) {
      reply = await api("POST", "/v1/shopping/sessions", body);
      shop.sessionId = reply.session_id;
    }
    renderTurn(reply);
  } catch (e) {
    shopLog.append(el("li", {class: "msg system"}, errorBox(e, () => sendShopping(text))));
  } finally {
    busy(shopSend, false);
  }
}

shopForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const text = shopInput.value.trim();
  if (!text) return;
  shopLog.append(el("li", {class: "msg user"}, el("p", {class: "text", text})));
  shopInput.value = "";
  sendShopping(text);
});

document.getElementById("shop-new").addEventListener("click", () => {
  if (shop.sessionId) api("DELETE", `/v1/shopping/sessions/${encodeURIComponent(shop.sessionId)}`).catch(() => {});
  shop.sessionId = null;
  shop.cards = {};
  shopLog.replaceChildren();
  renderCart({cart: {}, items: [], total: 0});
  shopInput.focus();
});

// ------------------------------------------------------------------------------------------ livestream
const ls = {streams: [], stream: null};
const lsSelect = document.getElementById("ls-stream");
const lsTime = document.getElementById("ls-time");
const lsBar = document.getElementById("ls-bar");
const lsAnswer = document.getElementById("ls-answer");

function onScreen(stream, second) {
  return stream.products.find((p) => p.start_s <= second && second < p.end_s) || null;
}

function drawTimeline() {
  const stream = ls.stream;
  lsBar.replaceChildren();
  if (!stream) return;
  for (const p of stream.products) {
    lsBar.append(el("span", {class: "segment", title: `${clock(p.start_s)}–${clock(p.end_s)} ${p.title}`,
      style: `left:${(100 * p.start_s) / stream.duration_s}%;width:${(100 * (p.end_s - p.start_s)) / stream.duration_s}%`}));
  }
  lsBar.append(el("span", {class: "cursor", style: `left:${(100 * Number(lsTime.value)) / stream.duration_s}%`}));
}

function showMoment() {
  const stream = ls.stream;
  const second = Number(lsTime.value);
  document.getElementById("ls-clock").textContent = `${clock(second)} / ${stream ? clock(stream.duration_s) : "0:00"}`;
  const product = stream && onScreen(stream, second);
  const label = product ? `On screen: ${product.title} (${money(product.price, product.currency)})` : "Nothing on screen (host chat)";
  document.getElementById("ls-onscreen").textContent = label;
  lsTime.setAttribute("aria-valuetext", `${clock(second)}, ${label}`);
  drawTimeline();
}

function chooseStream(id) {
  ls.stream = ls.streams.find((s) => s.stream_id === id) || null;
  if (!ls.stream) return;
  lsTime.max = String(ls.stream.duration_s - 1);
  // Start where the first product is on screen, as a viewer who has just joined would see it.
  const first = ls.stream.products[0];
  lsTime.value = String(first ? Math.min(first.start_s + 5, first.end_s - 1) : 0);
  showMoment();
}

async function loadStreams() {
  try {
    const data = await api("GET", "/v1/livestream/streams");
    ls.streams = data.streams;
    lsSelect.replaceChildren(...ls.streams.map((s) => el("option", {value: s.stream_id, text: `${s.title} — ${s.host}`})));
    if (!ls.streams.length) lsAnswer.replaceChildren(el("p", {class: "error", text: "This server has no streams."}));
    else chooseStream(ls.streams[0].stream_id);
  } catch (e) {
    if (e.status !== 404) lsAnswer.replaceChildren(errorBox(e, loadStreams));  // 404: the panel's notice says it
  }
}

lsSelect.addEventListener("change", () => chooseStream(lsSelect.value));
lsTime.addEventListener("input", showMoment);

async function askLivestream(question) {
  const button = document.getElementById("ls-ask");
  busy(button, true);
  try {
    const reply = await api("POST", "/v1/livestream/answer",
      {question, stream_id: ls.stream ? ls.stream.stream_id : undefined, ts_offset_s: Number(lsTime.value)});
    const facts = (reply.cited_facts || []).map((f) => el("li", {class: "fact", text: f}));
    lsAnswer.replaceChildren(
      el("p", {class: "question", text: `“${question}” at ${clock(Number(lsTime.value))}`}),
      el("p", {class: "text", text: reply.answer || "(no answer)"}),
      facts.length ? el("div", {class: "facts"}, el("h3", {text: "Cited facts"}), el("ul", {}, facts)) : null,
      statusLine(reply));
  } catch (e) {
    lsAnswer.replaceChildren(errorBox(e, () => askLivestream(question)));
  } finally {
    busy(button, false);
  }
}

document.getElementById("ls-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const q = document.getElementById("ls-question").value.trim();
  if (q) askLivestream(q);
});

// ------------------------------------------------------------------------------------------ travel
const trResult = document.getElementById("tr-result");

function itineraryView(reply) {
  const stops = reply.stops || [];
  if (!stops.length) return null;
  const first = Math.min(...stops.map((s) => s.arrive_min));
  const last = Math.max(...stops.map((s) => s.depart_min));
  const span = Math.max(1, last - first);
  const pos = (m) => `${(100 * (m - first)) / span}%`;
  const bar = el("div", {class: "bar day", "aria-hidden": "true"});
  stops.forEach((s, k) => {
    bar.append(el("span", {class: "segment stop", title: `${hhmm(s.arrive_min)}–${hhmm(s.depart_min)} ${s.name}`,
      style: `left:${pos(s.arrive_min)};width:${(100 * Math.max(1, s.depart_min - s.arrive_min)) / span}%`}, el("span", {text: String(k + 1)})));
  });
  for (const leg of reply.legs || []) {
    bar.append(el("span", {class: "segment leg", style: `left:${pos(leg.depart_min)};width:${(100 * leg.travel_min) / span}%`}));
  }
  const list = el("ol", {class: "stops"});
  stops.forEach((s, k) => {
    list.append(el("li", {class: "stop"},
      el("span", {class: "when", text: `${hhmm(s.arrive_min)}–${hhmm(s.depart_min)}`}),
      el("span", {class: "where", text: s.name}),
      el("span", {class: "what", text: `${s.category.replace(/_/g, " ")} · open ${hhmm(s.opens)}–${hhmm(s.closes)}`})));
    const leg = (reply.legs || [])[k];
    if (leg) list.append(el("li", {class: "leg", text: `↓ ${leg.travel_min} min by ${leg.mode}`}));
  });
  return el("div", {class: "itinerary"}, bar,
    el("p", {class: "axis"}, el("span", {text: hhmm(first)}), el("span", {text: hhmm(last)})), list);
}

async function planTrip() {
  const button = document.getElementById("tr-plan");
  const constraints = {
    day: document.getElementById("tr-day").value,
    start_min: minutesOf(document.getElementById("tr-start").value),
    end_min: minutesOf(document.getElementById("tr-end").value),
    mode: document.getElementById("tr-mode").value,
  };
  const must = document.getElementById("tr-must").value.split(",").map((s) => s.trim().toLowerCase().replace(/ /g, "_")).filter(Boolean);
  if (must.length) constraints.must_categories = must;
  const budget = document.getElementById("tr-budget").value;
  if (budget) constraints.budget = Number(budget);
  if (constraints.end_min <= constraints.start_min) {
    trResult.replaceChildren(el("p", {class: "error", role: "alert", text: "“Until” must be after “From”."}));
    return;
  }
  busy(button, true);
  try {
    const reply = await api("POST", "/v1/travel/plan", {request: document.getElementById("tr-request").value.trim(), constraints});
    trResult.replaceChildren(el("p", {class: "text", text: reply.reply || "(no reply)"}), itineraryView(reply) || "", statusLine(reply));
  } catch (e) {
    trResult.replaceChildren(errorBox(e, planTrip));
  } finally {
    busy(button, false);
  }
}

document.getElementById("tr-form").addEventListener("submit", (e) => { e.preventDefault(); planTrip(); });

// ------------------------------------------------------------------------------------------ start
// Apps this server does not serve keep their tab, marked, and say so in their panel instead of failing on use.
async function markServedApps() {
  let apps;
  try {
    apps = (await (await fetch("/readyz")).json()).apps;
  } catch (e) {
    return;
  }
  if (!Array.isArray(apps)) return;
  for (const tab of tabs) {
    const name = tab.id.replace("tab-", "");
    if (apps.includes(name)) continue;
    tab.classList.add("unserved");
    tab.setAttribute("title", `This server does not serve the ${name} app`);
    const panel = document.getElementById(tab.getAttribute("aria-controls"));
    panel.prepend(el("p", {class: "error notice", role: "note",
      text: `This server does not serve the ${name} app (it serves: ${apps.join(", ") || "nothing"}). ` +
            `Start it with a ${name} world: sidekick serve AGENT --world … --world runs/demo/${name === "shopping" ? "world" : name}`}));
  }
}

renderCart({cart: {}, items: [], total: 0});
markServedApps();
const fromHash = () => tabs.find((t) => `#${t.id.replace("tab-", "")}` === location.hash);
select(fromHash() || tabs[0], false);
window.addEventListener("hashchange", () => { const tab = fromHash(); if (tab) select(tab, false); });
