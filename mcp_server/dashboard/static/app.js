// rlide's dashboard: a small page with no dependencies. Every text that comes from the log (tasks,
// tool arguments, results, diffs: written by an IDE agent, hostile until proven otherwise) is put in
// the page as text nodes, never as HTML.
"use strict";

const view = document.getElementById("view");
const POLL_MS = 3000;
let poll = null;

// -- helpers ---------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function show(...parts) {
  view.replaceChildren(...parts.flat(2).filter((p) => p !== null && p !== undefined && p !== false));
}

async function api(path, options = {}) {
  const init = { credentials: "same-origin", headers: {} };
  if (options.method) {
    init.method = options.method;
    init.headers["Content-Type"] = "application/json";
    init.headers["X-Rlide-Request"] = "1";
    init.body = JSON.stringify(options.body || {});
  }
  const response = await fetch(path, init);
  if (response.status === 401) { location.href = "/login?next=" + encodeURIComponent("/" + location.hash); throw new Error("sign in"); }
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function toast(message, error) {
  const el = document.getElementById("toast");
  el.textContent = message;
  el.className = "show" + (error ? " error" : "");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.className = ""; }, 4000);
}

async function act(promise, done) {
  try { const result = await promise; if (done) toast(done); return result; }
  catch (err) { toast(err.message, true); throw err; }
}

function reward(value) {
  if (value === null || value === undefined) return h("span", { class: "zero" }, "–");
  return h("span", { class: value > 0 ? "pos" : value < 0 ? "neg" : "zero" }, (value > 0 ? "+" : "") + value.toFixed(2));
}

// "tests +1.00 · outcome -1.00": where an episode's reward came from (tests only when verified).
const components = (e) => Object.entries(e.reward_components).map(([k, v]) => `${k} ${v > 0 ? "+" : ""}${v.toFixed(2)}`).join(" · ");
const badge = (text, cls) => h("span", { class: "badge " + (cls || text) }, text);
const when = (iso) => iso ? new Date(iso).toLocaleString() : "";
const short = (text, n) => text.length > n ? text.slice(0, n - 1) + "…" : text;
const author = () => document.getElementById("author").value.trim();

function diffView(text) {
  const pre = h("pre", { class: "diff", dataset: { test: "diff" } });
  for (const line of text.split("\n")) {
    const cls = line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") ? "file"
      : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : null;
    pre.append(cls ? h("span", { class: cls }, line) : document.createTextNode(line + "\n"));
  }
  return pre;
}

function folded(label, part, episodeId, stepId, key) {
  if (!part || part.text === null) return null;
  const pre = h("pre", {}, part.text);
  const box = h("details", { open: part.chars <= 400 }, h("summary", {}, `${label} (${part.chars} characters)`), pre);
  if (part.folded) {
    box.append(h("button", { class: "secondary", onclick: async (ev) => {
      const full = await act(api(`/api/episodes/${episodeId}/steps/${stepId}`));
      pre.textContent = key === "arguments" ? JSON.stringify(full.arguments, null, 1) : full.result;
      ev.target.remove();
    } }, "show all"));
  }
  return box;
}

// -- episodes list ---------------------------------------------------------------------------------

const FILTERS = ["status", "source", "min_reward", "max_reward", "q", "since", "until", "excluded"];

function params() {
  const query = location.hash.split("?")[1] || "";
  return new URLSearchParams(query);
}

async function episodesView() {
  const p = params();
  const limit = 50, offset = Number(p.get("offset") || 0);
  const field = (name, input) => h("label", {}, name.replace("_", " "), input);
  const select = (name, options) => h("select", { name }, options.map((o) => h("option", { value: o, selected: p.get(name) === o }, o || "any")));
  const form = h("form", { class: "filters", dataset: { test: "filters" }, onsubmit: (ev) => {
    ev.preventDefault();
    const next = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v !== "") next.set(k, v);
    location.hash = "#/episodes?" + next.toString();
  } },
    field("task", h("input", { name: "q", value: p.get("q") || "", size: 24, placeholder: "text in the task" })),
    field("status", select("status", ["", "open", "success", "failure", "aborted", "timeout"])),
    field("source", select("source", ["", "external", "policy"])),
    field("min_reward", h("input", { name: "min_reward", type: "number", step: "0.1", min: -1, max: 1, value: p.get("min_reward") || "" })),
    field("max_reward", h("input", { name: "max_reward", type: "number", step: "0.1", min: -1, max: 1, value: p.get("max_reward") || "" })),
    field("since", h("input", { name: "since", type: "date", value: p.get("since") || "" })),
    field("until", h("input", { name: "until", type: "date", value: p.get("until") || "" })),
    field("excluded", select("excluded", ["", "false", "true"])),
    h("button", { type: "submit" }, "Filter"));
  const body = h("tbody");
  const count = h("span", { dataset: { test: "count" } });
  const pager = h("div", { class: "pager" });
  show(h("h1", {}, "Episodes"), form, pager,
    h("table", {}, h("thead", {}, h("tr", {}, ["when", "status", "source", "reward", "steps", "task"].map((t) => h("th", {}, t)))), body));

  const query = new URLSearchParams();
  for (const k of FILTERS) if (p.get(k)) query.set(k, p.get(k));
  async function load() {
    const page = await api(`/api/episodes?${query}&limit=${limit}&offset=${offset}`);
    body.replaceChildren(...page.episodes.map((e) => h("tr", { class: "row", dataset: { test: "episode-row", id: e.id }, onclick: () => { location.hash = "#/episode/" + e.id; } },
      h("td", {}, when(e.created_at)),
      h("td", {}, badge(e.status), e.excluded ? [" ", badge("excluded")] : null, e.verified ? null : [" ", badge("unverified")],
        e.flags ? [" ", badge("flagged")] : null),
      h("td", {}, e.source),
      h("td", {}, reward(e.reward_total), h("div", { class: "components" }, components(e))),
      h("td", {}, String(e.step_count + e.turn_count)),
      h("td", { class: "task" }, short(e.task, 160)))));
    if (!page.episodes.length) body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, offset ? "no more episodes" : "no episodes match")));
    const nav = (to) => { const next = new URLSearchParams(query); next.set("offset", to); location.hash = "#/episodes?" + next; };
    pager.replaceChildren(
      h("button", { class: "secondary", disabled: offset === 0, onclick: () => nav(Math.max(0, offset - limit)) }, "← newer"),
      h("span", {}, `${offset + 1}–${offset + page.episodes.length}`, " of ", count),
      h("button", { class: "secondary", disabled: !page.has_more, onclick: () => nav(offset + limit) }, "older →"));
    // The total comes after the first paint: counting a filtered log of 100,000 episodes takes longer than a page.
    api(`/api/episodes/count?${query}`).then((c) => { count.textContent = c.count.toLocaleString(); }).catch(() => {});
  }
  await load();
  poll = offset === 0 ? load : null;
}

// -- one episode -----------------------------------------------------------------------------------

function tokensView(turn) {
  const box = h("div", { class: "tokens", dataset: { test: "tokens" } });
  for (const t of turn.tokens) {
    const p = t.logprob === null || t.logprob === undefined ? 1 : Math.exp(t.logprob);
    // Confident tokens stay white; unlikely ones go red.
    const shade = Math.round(255 * Math.min(1, Math.max(0, p)));
    box.append(h("span", { style: `background: rgb(255, ${shade}, ${shade})`, title: `p=${p.toFixed(3)} logprob=${t.logprob}` }, t.token));
  }
  if (turn.tokens_total > turn.tokens.length) box.append(h("span", { class: "muted" }, ` … ${turn.tokens_total - turn.tokens.length} more tokens`));
  return box;
}

async function episodeView(id) {
  const d = await api("/api/episodes/" + encodeURIComponent(id));
  const e = d.episode;
  const rate = h("input", { type: "number", min: -1, max: 1, step: "0.1", value: "1", name: "rating", size: 4 });
  const rateComment = h("input", { name: "rating-comment", placeholder: "comment", size: 24 });
  const relabel = h("select", { name: "relabel" }, ["success", "failure", "aborted"].map((s) => h("option", { value: s, selected: s === e.status }, s)));
  const refresh = () => episodeView(id);
  const actions = h("div", { class: "actions" },
    h("fieldset", {}, h("legend", {}, "rate"), rate, rateComment, h("button", { dataset: { test: "rate" }, onclick: async () => {
      await act(api(`/api/episodes/${id}/rate`, { method: "POST", body: { value: Number(rate.value), comment: rateComment.value || null, author: author() } }), "rated");
      refresh();
    } }, "Rate")),
    e.status === "open" ? null : h("fieldset", {}, h("legend", {}, "outcome"), relabel, h("button", { class: "secondary", dataset: { test: "relabel" }, onclick: async () => {
      await act(api(`/api/episodes/${id}/relabel`, { method: "POST", body: { status: relabel.value } }), "relabelled");
      refresh();
    } }, "Relabel")),
    h("fieldset", {}, h("legend", {}, "training"), h("button", { class: "secondary", dataset: { test: "exclude" }, onclick: async () => {
      await act(api(`/api/episodes/${id}/exclude`, { method: "POST", body: { excluded: !e.excluded } }), e.excluded ? "included" : "excluded");
      refresh();
    } }, e.excluded ? "Include in training" : "Exclude from training")),
    e.status === "open" ? null : h("fieldset", {}, h("legend", {}, "delete"), h("button", { class: "danger", dataset: { test: "delete" }, onclick: async () => {
      if (!confirm(`Delete episode ${id} with its steps and rewards? This cannot be undone.`)) return;
      await act(api(`/api/episodes/${id}`, { method: "DELETE", body: { confirm: id } }), "deleted");
      location.hash = "#/episodes";
    } }, "Delete…")));

  const comparable = h("div", { dataset: { test: "comparable" } });
  api(`/api/episodes/${id}/comparable`).then((c) => {
    if (!c.episodes.length) { comparable.append(h("span", { class: "muted" }, "no other ended episode of this task")); return; }
    comparable.append(h("span", {}, "Compare with: "), ...c.episodes.map((o) => h("a", { href: `#/compare/${id}/${o.id}`, dataset: { test: "compare-link" }, style: "margin-right:10px" },
      `${o.id} (${o.status}, `, reward(o.reward_total), ")")));
  }).catch(() => {});

  const timeline = d.steps.map((s) => h("div", { class: "step" + (s.error ? " error" : ""), dataset: { test: "step" } },
    h("div", { class: "head" }, h("b", {}, s.tool), h("span", {}, `${s.duration_ms.toFixed(0)} ms`), h("span", {}, when(s.created_at))),
    folded("arguments", s.arguments, id, s.id, "arguments"),
    folded("result", s.result, id, s.id, "result"),
    s.error ? h("pre", { class: "neg" }, s.error) : null));
  const turns = d.turns.map((t) => h("div", { class: "card" },
    h("div", { class: "muted" }, `turn ${t.id} · ${t.model}` + (t.checkpoint_step !== null ? ` @ step ${t.checkpoint_step}` : "") + ` · ${t.finish_reason || ""}`),
    t.message && t.message.content ? h("pre", {}, t.message.content) : null,
    t.message && t.message.tool_calls ? h("pre", {}, JSON.stringify(t.message.tool_calls, null, 1)) : null,
    t.tokens.length ? tokensView(t) : null));
  const rewards = h("table", {}, h("thead", {}, h("tr", {}, ["source", "value", "verified", "comment", "when"].map((x) => h("th", {}, x)))),
    h("tbody", {}, d.rewards.map((r) => h("tr", { dataset: { test: "reward" } }, h("td", {}, r.source), h("td", {}, reward(r.value)), h("td", {}, r.verified ? "yes" : ""), h("td", {}, r.comment || ""), h("td", {}, when(r.created_at))))));
  const history = d.history.map((c) => h("li", {}, `${when(c.created_at)} ${c.action} `, h("span", { class: "muted" }, JSON.stringify(c.detail))));
  const v = d.verifier;
  const verification = v ? h("div", { class: "card", dataset: { test: "verification" } },
    h("h2", {}, "Verification"),
    h("p", {}, "verifier ", h("code", {}, v.command || "none"), ` · ${v.state}`, v.commit ? ` · tests from ${v.commit.slice(0, 12)}` : "",
      v.reason ? [" · ", h("span", { class: "muted" }, v.reason)] : null),
    v.fail_to_pass ? h("p", { class: "muted" }, `must come to pass: ${v.fail_to_pass.join(", ")}`) : null,
    v.verdict ? h("p", { dataset: { test: "verdict" } }, "end state: ", reward(v.verdict.reward), " ", v.verdict.line) : null) : null;
  const open = d.flags.filter((f) => !f.cleared_at);
  const flags = d.flags.length ? h("div", { class: "card", dataset: { test: "flags" } },
    h("h2", {}, open.length ? `Flagged: not trained on until cleared (${open.length})` : "Flags (cleared)"),
    h("ul", {}, d.flags.map((f) => h("li", { dataset: { test: "flag" } }, h("b", {}, f.kind), f.path ? ` ${f.path}${f.line ? ":" + f.line : ""}` : "", ` — ${f.detail}`,
      f.cleared_at ? h("span", { class: "muted" }, ` (cleared by ${f.cleared_by})`) : null))),
    open.length ? h("button", { dataset: { test: "clear-flags" }, onclick: async () => {
      await act(api(`/api/episodes/${id}/clear-flags`, { method: "POST", body: { author: author() } }), "flags cleared");
      refresh();
    } }, "I read the change: clear the flags") : null) : null;
  const diffs = [];
  if (d.solution) diffs.push(h("h2", {}, "The agent's work (start → end)"), diffView(d.solution));
  for (const s of d.states) if (s.diff && s.kind !== "end") diffs.push(h("details", {}, h("summary", {}, `workspace at ${s.kind} (${when(s.created_at)})`), diffView(s.diff)));

  show(
    h("p", {}, h("a", { href: "#/episodes" }, "← episodes")),
    h("div", { class: "card" },
      h("h1", { dataset: { test: "episode-id" } }, e.id, " ", badge(e.status, e.status), e.excluded ? [" ", badge("excluded")] : null,
        e.verified ? null : [" ", badge("unverified")], e.flags ? [" ", badge("flagged")] : null),
      h("div", { class: "task", dataset: { test: "task" } }, e.task),
      h("p", {}, "reward ", h("span", { dataset: { test: "reward-total" } }, reward(e.reward_total)), " ",
        h("span", { class: "muted" }, components(e)),
        " · ", `${e.source} · ${e.step_count} steps · ${e.turn_count} turns · ${when(e.created_at)}`),
      e.summary ? h("p", { class: "muted" }, e.summary) : null,
      actions),
    flags,
    verification,
    h("div", { class: "card" }, comparable),
    ...diffs,
    h("h2", {}, "Rewards"), rewards,
    d.turns.length ? [h("h2", {}, "Policy turns (token colour: probability)"), ...turns] : null,
    h("h2", {}, `Timeline (${d.steps.length} tool calls)`), ...timeline,
    history.length ? [h("h2", {}, "History"), h("ul", {}, history)] : null);
}

// -- compare two -------------------------------------------------------------------------------------

async function compareView(a, b) {
  const [da, db] = await Promise.all([api("/api/episodes/" + a), api("/api/episodes/" + b)]);
  const side = (label, d) => h("div", { class: "card", dataset: { test: "side" } },
    h("h2", {}, `${label}: `, h("a", { href: "#/episode/" + d.episode.id }, d.episode.id), " ", badge(d.episode.status), " ", reward(d.episode.reward_total)),
    h("div", { class: "task" }, short(d.episode.task, 600)),
    d.solution ? diffView(d.solution) : h("p", { class: "muted" }, "no captured diff"),
    h("p", { class: "muted" }, `${d.steps.length} tool calls: ` + d.steps.map((s) => s.tool).join(", ")),
    d.turns.length ? d.turns.map((t) => h("pre", {}, t.message && t.message.content ? t.message.content : JSON.stringify(t.message))) : null);
  const comment = h("input", { placeholder: "why (optional)", size: 40, name: "preference-comment" });
  const choose = (verdict) => async () => {
    const recorded = await act(api("/api/preferences", { method: "POST", body: { a, b, verdict, author: author(), comment: comment.value || null } }), "preference recorded");
    status.textContent = `recorded: ${verdict === "both_bad" ? "both bad" : verdict.toUpperCase() + " is better"}`;
    // Whether the pair trains on the configured student, said now, not found out at training time.
    const t = recorded.training || {};
    training.className = t.trainable === false ? "neg" : "muted";
    training.textContent = t.trainable === true ? "this pair trains on the student"
      : t.trainable === false ? `this pair will not train (${t.kind}): ${t.reason}` : (t.reason || "");
  };
  const status = h("span", { dataset: { test: "verdict-status" } });
  const training = h("p", { class: "muted", dataset: { test: "preference-training" } });
  show(h("h1", {}, "Which is better?"),
    h("div", { class: "verdict" },
      h("button", { dataset: { test: "prefer-a" }, onclick: choose("a") }, "← A is better"),
      h("button", { class: "secondary", dataset: { test: "both-bad" }, onclick: choose("both_bad") }, "Both bad"),
      h("button", { dataset: { test: "prefer-b" }, onclick: choose("b") }, "B is better →"), comment, status),
    training,
    h("div", { class: "compare" }, side("A", da), side("B", db)));
}

// -- training ------------------------------------------------------------------------------------------

const COLOURS = ["#2f5fd0", "#d0622f", "#1a7f37", "#8e44ad", "#c62828", "#00838f"];

function lineChart(title, series, yRange) {
  const W = 560, H = 200, L = 44, R = 10, T = 10, B = 26;
  const pts = series.flatMap((s) => s.points);
  const box = h("div", { class: "chart", dataset: { test: "chart", title } }, h("h3", {}, title));
  if (!pts.length) { box.append(h("p", { class: "muted" }, "no points yet")); return box; }
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (yRange) [y0, y1] = [Math.min(y0, yRange[0]), Math.max(y1, yRange[1])];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R), sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const el = (tag, attrs, text) => { const n = document.createElementNS(NS, tag); for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v); if (text !== undefined) n.textContent = text; svg.append(n); return n; };
  el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" });
  el("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" });
  for (const y of [y0, (y0 + y1) / 2, y1]) el("text", { x: L - 4, y: sy(y) + 3, "text-anchor": "end" }, Number(y.toPrecision(3)));
  for (const x of [x0, Math.round((x0 + x1) / 2), x1]) el("text", { x: sx(x), y: H - 8, "text-anchor": "middle" }, x);
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    if (s.points.length > 1) el("polyline", { points: s.points.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" "), fill: "none", stroke: colour, "stroke-width": 1.5 });
    for (const p of s.points) el("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: colour, class: "pt" }).append(Object.assign(document.createElementNS(NS, "title"), { textContent: `${s.name} step ${p[0]}: ${p[1]}` }));
  });
  box.append(svg, h("div", { class: "legend" }, series.map((s, i) => h("span", { style: `color:${COLOURS[i % COLOURS.length]}` }, "● " + s.name))));
  return box;
}

function metricSeries(steps, match) {
  const names = new Set();
  for (const s of steps) for (const k of Object.keys(s.metrics)) if (match(k)) names.add(k);
  return [...names].sort().map((name) => ({ name, points: steps.filter((s) => typeof s.metrics[name] === "number" && isFinite(s.metrics[name])).map((s) => [s.step, s.metrics[name]]) }));
}

async function trainingView() {
  const all = await api("/api/training");
  if (!all.runs.length) { show(h("h1", {}, "Training"), h("p", { class: "muted" }, "No training run yet: start one with `rlide train --once` or `rlide train --daemon`.")); return; }
  const chosen = params().get("run") || all.runs[0].name;
  const picker = h("select", { dataset: { test: "run-picker" }, onchange: (ev) => { location.hash = "#/training?run=" + encodeURIComponent(ev.target.value); } },
    all.runs.map((r) => h("option", { value: r.name, selected: r.name === chosen }, `${r.name} (${r.backend}, ${r.base_model})`)));
  const region = h("div");
  show(h("h1", {}, "Training ", picker), region);
  async function load() {
    const d = await api("/api/training/" + encodeURIComponent(chosen));
    const st = d.status, steps = d.steps;
    const evalSets = [...new Set(d.evals.map((e) => e.tasks))];
    const charts = h("div", { class: "charts" },
      lineChart("reward per step", [{ name: "reward mean", points: steps.filter((s) => s.reward_mean !== null).map((s) => [s.step, s.reward_mean]) }]),
      lineChart("loss", metricSeries(steps, (k) => /(^|\/)\w*loss$/.test(k))),
      lineChart("KL", metricSeries(steps, (k) => /kl/i.test(k))),
      lineChart("pass@1 by checkpoint", evalSets.map((t) => ({ name: t, points: d.evals.filter((e) => e.tasks === t && e.step !== null).map((e) => [e.step, e.pass_at_1]) })), [0, 1]));
    const skipped = Object.entries(st.sft_unusable_reasons).map(([why, n]) => h("li", {}, `${n} × ${why}`));
    region.replaceChildren(
      h("div", { class: "card" },
        h("p", {}, `state ${st.state}`, st.message ? ` (${st.message})` : "", ` · serving step `, h("b", { dataset: { test: "served-step" } }, String(st.step)),
          ` · ${st.backend} · ${st.base_model}`),
        h("p", {}, `GRPO groups trained ${st.groups_trained}, skipped: ${st.groups_skipped_zero_variance} with equal rewards, ${st.groups_skipped_stale} sampled by an older policy`,
          ` · SFT steps ${st.sft_steps} (${st.sft_episodes_trained} episodes, ${st.sft_episodes_unusable} set aside) · DPO steps ${st.dpo_steps} (${st.dpo_pairs_trained} pairs)`),
        skipped.length ? h("details", {}, h("summary", {}, "why episodes were set aside"), h("ul", {}, skipped)) : null,
        st.sft_skip_reason ? h("p", { class: "muted" }, st.sft_skip_reason) : null,
        st.scenario_unavailable_reason ? h("p", { class: "muted" }, st.scenario_unavailable_reason) : null),
      charts,
      h("h2", {}, "Steps"),
      h("table", {}, h("thead", {}, h("tr", {}, ["step", "algorithm", "reward", "groups", "skipped (equal / stale)", "when"].map((x) => h("th", {}, x)))),
        h("tbody", {}, steps.slice(-50).reverse().map((s) => h("tr", { dataset: { test: "step-row" } }, h("td", {}, String(s.step)), h("td", {}, s.algorithm), h("td", {}, reward(s.reward_mean)),
          h("td", {}, String(s.groups_trained)), h("td", {}, `${s.groups_skipped_zero_variance} / ${s.groups_skipped_stale}`), h("td", {}, when(s.created_at)))))),
      h("h2", {}, "Evaluations"),
      d.evals.length ? h("table", {}, h("thead", {}, h("tr", {}, ["step", "tasks", "model", "passed", "pass@1", "95% interval", "when"].map((x) => h("th", {}, x)))),
        h("tbody", {}, d.evals.slice().reverse().map((e) => h("tr", { dataset: { test: "eval-row" } }, h("td", {}, String(e.step)), h("td", {}, e.tasks), h("td", {}, e.model),
          h("td", {}, `${e.passed}/${e.n}`), h("td", {}, e.pass_at_1.toFixed(3)), h("td", {}, e.ci95 ? `${e.ci95.low.toFixed(2)}–${e.ci95.high.toFixed(2)}` : ""), h("td", {}, when(e.created_at))))))
        : h("p", { class: "muted" }, "no evaluation yet: `rlide eval` records one per checkpoint"));
  }
  await load();
  poll = load;
}

// -- index ------------------------------------------------------------------------------------------------

async function indexView() {
  const region = h("div");
  show(h("h1", {}, "Code index"), region);
  async function load() {
    const d = await api("/api/index");
    region.replaceChildren(d.workspaces.length ? h("table", {}, h("thead", {}, h("tr", {}, ["workspace", "files", "chunks", "embedded", "progress", "size", "changed"].map((x) => h("th", {}, x)))),
      h("tbody", {}, d.workspaces.map((w) => h("tr", { dataset: { test: "index-row" } },
        h("td", {}, w.name, w.error ? h("div", { class: "neg" }, w.error) : null), h("td", {}, w.files.toLocaleString()), h("td", {}, w.chunks.toLocaleString()),
        h("td", {}, `${w.vectors.toLocaleString()} (${w.pending.toLocaleString()} pending)`),
        h("td", {}, h("progress", { max: Math.max(w.chunks, 1), value: w.vectors }), w.chunks ? ` ${Math.floor(100 * w.vectors / w.chunks)}%` : ""),
        h("td", {}, `${(w.bytes / 1e6).toFixed(1)} MB`), h("td", {}, new Date(w.modified * 1000).toLocaleString())))))
      : h("p", { class: "muted" }, "Nothing indexed yet: `rlide index PATH`, or index_workspace from the IDE."));
  }
  await load();
  poll = load;
}

// -- routing --------------------------------------------------------------------------------------------

async function route() {
  poll = null;
  const path = location.hash.replace(/^#/, "").split("?")[0] || "/episodes";
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.nav === (parts[0] === "episode" || parts[0] === "compare" ? "episodes" : parts[0]));
  try {
    if (parts[0] === "episode" && parts[1]) await episodeView(parts[1]);
    else if (parts[0] === "compare" && parts[2]) await compareView(parts[1], parts[2]);
    else if (parts[0] === "training") await trainingView();
    else if (parts[0] === "index") await indexView();
    else await episodesView();
  } catch (err) {
    show(h("h1", {}, "Something went wrong"), h("p", { class: "neg", dataset: { test: "error" } }, err.message));
  }
}

setInterval(() => {
  if (poll && document.visibilityState === "visible") poll().catch(() => {});
}, POLL_MS);

window.addEventListener("hashchange", route);
(async () => {
  const input = document.getElementById("author");
  input.value = localStorage.getItem("rlide-author") || "";
  input.addEventListener("change", () => localStorage.setItem("rlide-author", input.value.trim()));
  if (!input.value) {
    try { input.value = (await api("/api/whoami")).author; } catch (err) { /* the page still works; a rating then asks for a name */ }
  }
  await route();
})();
