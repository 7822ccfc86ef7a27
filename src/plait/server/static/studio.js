// plait Studio: the live parts of the page. Without this file every page still reads and
// every form still works; with it: live updates (server-sent events: a thread, the thread
// list, the run queue's runs), keyboard navigation of the timeline, lazily loaded large
// values, confirmations and the dark/light switch.
// No framework and no build step: a plain ES module, served from the package.

const root = document.documentElement;
root.classList.add("js");

// -- dark / light ---------------------------------------------------------------------------
const saved = localStorage.getItem("plait-theme");
if (saved) root.dataset.theme = saved;
document.getElementById("theme")?.addEventListener("click", () => {
  const dark = root.dataset.theme
    ? root.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  root.dataset.theme = dark ? "light" : "dark";
  localStorage.setItem("plait-theme", root.dataset.theme);
});

// -- confirmations ----------------------------------------------------------------------------
document.addEventListener("submit", (ev) => {
  const form = ev.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !confirm(form.dataset.confirm)) {
    ev.preventDefault();
  }
});

// -- the JSON tree's lazy values --------------------------------------------------------------
const LONG = 2000; // characters of a string drawn before its "show all" button

function tree(value, label) {
  const line = (el) => {
    if (label !== undefined) {
      const k = document.createElement("span");
      k.className = "k";
      k.textContent = label;
      el.prepend(k, ": ");
    }
    return el;
  };
  if (value !== null && typeof value === "object") {
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    const details = document.createElement("details");
    details.className = "node";
    const summary = document.createElement("summary");
    const t = document.createElement("span");
    t.className = "t";
    t.textContent = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
    summary.append(t);
    line(summary);
    details.append(summary);
    details.addEventListener("toggle", () => {
      if (details.open && details.children.length === 1) {
        for (const [k, v] of entries) details.append(tree(v, k));
      }
    }, { once: false });
    return details;
  }
  const div = document.createElement("div");
  div.className = "leaf";
  const v = document.createElement("span");
  v.className = "v " + (value === null ? "null" : typeof value === "string" ? "str" : typeof value === "number" ? "num" : "bool");
  const text = JSON.stringify(value);
  v.textContent = text.length > LONG ? text.slice(0, LONG) + "…" : text;
  div.append(v);
  if (text.length > LONG) {
    // A long string is laid out whole only when asked: megabytes of text take seconds.
    const all = document.createElement("button");
    all.type = "button";
    all.className = "all";
    all.textContent = `show all ${value.length.toLocaleString()} characters`;
    all.addEventListener("click", () => { v.textContent = text; all.remove(); });
    div.append(" ", all);
  }
  return line(div);
}

document.addEventListener("click", async (ev) => {
  const button = ev.target instanceof Element ? ev.target.closest("button[data-lazy]") : null;
  if (!button) return;
  button.disabled = true;
  const reply = await fetch(button.dataset.lazy, { headers: { Accept: "application/json" } });
  const body = await reply.json();
  const holder = button.closest(".channel");
  if (!reply.ok) {
    button.textContent = body.message || "could not load";
    return;
  }
  const node = tree(body.value, body.key);
  holder.replaceChildren(node);
  if (node instanceof HTMLDetailsElement) node.open = true;
});

// -- the timeline: keyboard, picking two checkpoints -----------------------------------------
function timelineItems() {
  return [...document.querySelectorAll(".timeline li")];
}

function bindPicks() {
  const boxes = [...document.querySelectorAll('#pick-form input[name="pick"]')];
  const button = document.getElementById("diff-selected");
  const order = [];
  const sync = () => {
    if (button) button.disabled = boxes.filter((b) => b.checked).length !== 2;
  };
  for (const box of boxes) {
    box.addEventListener("change", () => {
      if (box.checked) {
        order.push(box);
        const checked = boxes.filter((b) => b.checked);
        if (checked.length > 2) order.shift().checked = false; // keep the last two picked
      }
      sync();
    });
  }
  sync();
}

document.addEventListener("keydown", (ev) => {
  const target = ev.target;
  if (target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement) return;
  if (ev.metaKey || ev.ctrlKey || ev.altKey) return;
  const items = timelineItems();
  if (!items.length) return;
  const at = Math.max(0, items.findIndex((li) => li.getAttribute("aria-current") === "true"));
  let go = null;
  if (ev.key === "ArrowDown" || ev.key === "j") go = Math.min(items.length - 1, at + 1);
  else if (ev.key === "ArrowUp" || ev.key === "k") go = Math.max(0, at - 1);
  else if (ev.key === "Home") go = 0;
  else if (ev.key === "End") go = items.length - 1;
  else if (ev.key === "x" || ev.key === " ") {
    const box = items[at].querySelector('input[name="pick"]');
    box.checked = !box.checked;
    box.dispatchEvent(new Event("change"));
    ev.preventDefault();
    return;
  } else if (ev.key === "d") {
    const button = document.getElementById("diff-selected");
    if (button && !button.disabled) button.click();
    return;
  }
  if (go === null || go === at) return;
  ev.preventDefault();
  items[go].querySelector("a.cp").click();
});

// -- live parts: refresh the [data-live] regions when the store says something changed -------
// Each live region's HTML as the server last sent it.
const served = new WeakMap();
for (const region of document.querySelectorAll("[data-live]")) served.set(region, region.outerHTML);
let refreshing = null;
async function refresh() {
  if (refreshing) return refreshing;
  refreshing = (async () => {
    try {
      const reply = await fetch(location.href, { headers: { Accept: "text/html" } });
      if (!reply.ok) return;
      const doc = new DOMParser().parseFromString(await reply.text(), "text/html");
      for (const region of document.querySelectorAll("[data-live]")) {
        const fresh = doc.getElementById(region.id);
        const focused = document.activeElement;
        if (!fresh || (region.contains(focused) && typing(focused))) continue;
        // Unchanged on the server: keep it as it is here (values loaded, trees unfolded).
        const html = fresh.outerHTML;
        if (served.get(region) === html) continue;
        keepPicks(region, fresh);
        region.replaceWith(fresh);
        served.set(fresh, html);
      }
      bindPicks();
      document.dispatchEvent(new CustomEvent("plait:refreshed"));
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

function typing(el) {
  return (el instanceof HTMLInputElement && el.type !== "checkbox") || el instanceof HTMLTextAreaElement || el instanceof HTMLSelectElement;
}

function keepPicks(old, fresh) {
  for (const box of old.querySelectorAll('input[name="pick"]:checked')) {
    const twin = fresh.querySelector(`input[name="pick"][value="${CSS.escape(box.value)}"]`);
    if (twin) twin.checked = true;
  }
}

const stream = document.querySelector("[data-sse]");
if (stream && "EventSource" in window) {
  const source = new EventSource(stream.dataset.sse);
  // The first event is the state as the stream found it: refresh then too, in case the store
  // moved between rendering this page and opening the stream.
  const onChange = () => refresh();
  source.addEventListener("thread", onChange);
  source.addEventListener("threads", onChange);
  source.addEventListener("runs", onChange);
  root.dataset.live = "on";
}

// Navigating the timeline with the keyboard keeps the focus on the selected checkpoint.
document.querySelector('.timeline li[aria-current="true"] a.cp')?.focus({ preventScroll: false });
bindPicks();
