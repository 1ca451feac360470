// Khuluma playground: every capability of the API in one page, with no dependencies and no build step.
// Text from the service is only ever inserted as text nodes (never HTML), and the page's CSP forbids inline code.

const TOKEN_KEY = "khuluma-token";
const PALETTE = ["#ffd6a5", "#caffbf", "#9bf6ff", "#bdb2ff", "#ffc6ff", "#fdffb6", "#a0c4ff", "#ffadad", "#d0f4de"];

const $ = (id) => document.getElementById(id);

/** A DOM element with attributes (``on*`` as listeners, ``dataset`` merged) and children (strings become text). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") Object.assign(node.style, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== undefined && child !== null) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function colourFor(key, assigned) {
  if (!assigned.has(key)) assigned.set(key, PALETTE[assigned.size % PALETTE.length]);
  return assigned.get(key);
}

function legend(list, assigned, describe = (key) => key) {
  list.replaceChildren(
    ...[...assigned].map(([key, colour]) =>
      el("li", {}, el("span", { class: "swatch", style: { background: colour }, "aria-hidden": "true" }), describe(key)),
    ),
  );
}

// --- the API ------------------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
    this.detail = detail;
  }
}

const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

function explain(error) {
  // fetch rejects with a TypeError only when no answer came at all
  if (error instanceof TypeError) return `Cannot reach the service: ${error.message}`;
  if (!(error instanceof ApiError)) return `${error.message[0].toUpperCase()}${error.message.slice(1)}.`;
  if (error.status === 401) {
    return `The service refused your token (401): ${error.detail}. Sign in above with a valid token.`;
  }
  return `${error.status}: ${error.detail}`;
}

async function errorOf(response) {
  let detail = response.statusText || "error";
  try {
    const body = await response.json();
    if (body && body.detail !== undefined) detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  } catch {
    /* not JSON: keep the status text */
  }
  return new ApiError(response.status, detail);
}

const RETRIES_WHEN_BUSY = 3;
const MAX_RETRY_AFTER_S = 15;

/** Calls the API with the session's token; resolves to the JSON answer, rejects with an ApiError. A 503 that
 * says when to come back (Retry-After) is retried then, a few times. */
async function api(path, { method = "GET", json, form, params, authenticated = true } = {}) {
  if (authenticated && !token()) throw new ApiError(401, "No token yet");
  const url = new URL(path, window.location.origin);
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  const headers = authenticated ? { "X-CLIENT-TOKEN": token() } : {};
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form;
  }
  let response = await fetch(url, { method, headers, body });
  // a 503 with Retry-After was refused before any work (the server is at capacity): wait as told and try again
  for (let retry = 0; retry < RETRIES_WHEN_BUSY && response.status === 503; retry++) {
    const seconds = Number(response.headers.get("Retry-After"));
    if (!Number.isFinite(seconds) || seconds <= 0 || seconds > MAX_RETRY_AFTER_S) break;
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    response = await fetch(url, { method, headers, body });
  }
  if (!response.ok) throw await errorOf(response);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** A multipart upload with progress (fetch cannot report upload progress; XMLHttpRequest can). */
function upload(path, file, onProgress) {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open("POST", path);
    request.setRequestHeader("X-CLIENT-TOKEN", token());
    request.upload.addEventListener("progress", (e) => e.lengthComputable && onProgress(e.loaded / e.total));
    request.addEventListener("load", () => {
      let body = null;
      try {
        body = JSON.parse(request.responseText);
      } catch {
        /* keep null */
      }
      if (request.status >= 200 && request.status < 300) resolve(body);
      else reject(new ApiError(request.status, (body && body.detail) || request.statusText || "error"));
    });
    request.addEventListener("error", () => reject(new TypeError("the upload was interrupted")));
    const form = new FormData();
    form.append("file", file, file.name);
    request.send(form);
  });
}

// --- panels: errors, busy state --------------------------------------------------------------------------------

function panelOf(node) {
  return node.closest('[role="tabpanel"]');
}

function showError(panel, error) {
  const box = panel.querySelector("[data-error]");
  box.textContent = error ? explain(error) : "";
}

/** Runs ``work`` for a form: clears the panel's error, disables the submit button meanwhile, shows failures. */
function onSubmit(form, work) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const panel = panelOf(form);
    const button = form.querySelector('button[type="submit"]');
    showError(panel, null);
    if (!token()) {
      panel.querySelector("[data-error]").textContent = "Paste your API token above and sign in first.";
      return;
    }
    button.disabled = true;
    panel.setAttribute("aria-busy", "true");
    try {
      await work();
    } catch (error) {
      showError(panel, error);
    } finally {
      button.disabled = false;
      panel.removeAttribute("aria-busy");
    }
  });
}

// --- sign-in ------------------------------------------------------------------------------------------------------

async function checkToken(candidate) {
  // GET /ws/stream-transcribe is the API's cheapest authenticated call: an empty 200 for a good token
  const response = await fetch("/ws/stream-transcribe", { headers: { "X-CLIENT-TOKEN": candidate } });
  if (!response.ok) throw await errorOf(response);
}

function setupSignIn() {
  const form = $("signin");
  const status = $("signin-status");
  const signedIn = (yes) => {
    $("signout").hidden = !yes;
    status.className = yes ? "status ok" : "status";
    status.textContent = yes ? "Signed in: your token is accepted." : "Not signed in.";
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const candidate = $("token").value.trim();
    status.className = "status";
    status.textContent = "Checking the token…";
    try {
      await checkToken(candidate);
      sessionStorage.setItem(TOKEN_KEY, candidate);
      $("token").value = "";
      signedIn(true);
      refreshKnowledgeBases().catch((error) => showError($("panel-kb"), error));
    } catch (error) {
      sessionStorage.removeItem(TOKEN_KEY);
      $("signout").hidden = true;
      status.className = "status error";
      status.textContent =
        error instanceof ApiError && error.status === 401
          ? `This token was refused (401): ${error.detail}. Check it, or create one with khuluma token create.`
          : explain(error);
    }
  });
  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    signedIn(false);
  });
  signedIn(Boolean(token()));
}

// --- tabs (WAI-ARIA tabs: arrows, Home and End move between tabs) ---------------------------------------------------

function setupTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const select = (tab, focus = true) => {
    for (const other of tabs) {
      const selected = other === tab;
      other.setAttribute("aria-selected", String(selected));
      other.tabIndex = selected ? 0 : -1;
      $(other.getAttribute("aria-controls")).hidden = !selected;
    }
    if (focus) tab.focus();
    history.replaceState(null, "", `#${tab.id.slice(4)}`);
  };
  tabs.forEach((tab, index) => {
    tab.addEventListener("click", () => select(tab));
    tab.addEventListener("keydown", (event) => {
      const next = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: tabs.length - 1 }[event.key];
      if (next === undefined) return;
      event.preventDefault();
      select(tabs[(next + tabs.length) % tabs.length]);
    });
  });
  const wanted = $(`tab-${window.location.hash.slice(1)}`);
  if (wanted) select(wanted, false);
}

// --- what /api/v1/models says, beside each tab ----------------------------------------------------------------------

let capabilities = new Map();

// Measured quality on real data (contracts/quality.py), the publisher's figure (marked so), or "unmeasured": never
// a bare tick.
function qualityLabel(quality) {
  if (!quality) return null;
  if (quality.published) {
    const figure = quality.value == null ? "published figures" : `${quality.metric}: ${quality.value}`;
    const title = [quality.data, quality.note].filter(Boolean).join(" — ");
    return el("span", { class: "quality published", title }, ` · ${figure} (published, not measured here)`);
  }
  if (!quality.measured) return el("span", { class: "quality unmeasured" }, " · unmeasured");
  const figure = `${quality.metric} ${Number(quality.value).toFixed(2)}`;
  const short = quality.short_value == null ? "" : `, short sentences ${Number(quality.short_value).toFixed(2)}`;
  const title = [quality.data, quality.short_data, quality.note, quality.command].filter(Boolean).join(" — ");
  return el(
    "span",
    { class: quality.poor ? "quality poor" : "quality", title },
    ` · ${figure}${short}${quality.poor ? " (poor)" : ""}`,
  );
}

function describeCapability(info) {
  const languages = info.languages || [];
  return el(
    "div",
    { class: "capability", dataset: { capability: info.capability } },
    el("h2", {}, info.capability.replaceAll("_", " ")),
    el("p", {}, info.installed ? `Model: ${info.model || "?"}` : "Not installed."),
    info.note ? el("p", { class: "help" }, info.note) : null,
    languages.length
      ? el(
          "ul",
          { "aria-label": "Languages" },
          languages.map((lang) =>
            el(
              "li",
              { class: lang.supported ? "yes" : "no", title: lang.note || "" },
              `${lang.name} (${lang.code})`,
              lang.supported ? "" : el("span", { class: "sr-only" }, ": no model"),
              lang.supported && lang.family ? el("span", { class: "family" }, ` · ${lang.model} (${lang.family})`) : null,
              lang.licence ? el("span", { class: "licence", title: "licence" }, ` · ${lang.licence}`) : null,
              qualityLabel(lang.quality),
            ),
          ),
        )
      : null,
  );
}

function fillLanguageSelect(select, languages, { detect = false, preferred = "" } = {}) {
  const options = detect ? [el("option", { value: "" }, "Detect it")] : [];
  for (const lang of languages) {
    const label = `${lang.name} (${lang.code})${lang.supported ? "" : " — no model"}`;
    options.push(el("option", { value: lang.code, selected: lang.code === preferred }, label));
  }
  select.replaceChildren(...options);
}

async function loadModels() {
  let listing;
  try {
    listing = await api("/api/v1/models", { authenticated: false });
  } catch (error) {
    for (const aside of document.querySelectorAll("aside.models")) aside.textContent = `Models: ${explain(error)}`;
    return;
  }
  capabilities = new Map(listing.capabilities.map((info) => [info.capability, info]));
  for (const aside of document.querySelectorAll("aside.models")) {
    const names = aside.dataset.capabilities.split(" ");
    aside.replaceChildren(
      ...names.filter((name) => capabilities.has(name)).map((name) => describeCapability(capabilities.get(name))),
    );
  }
  const translation = (capabilities.get("translation") || {}).languages || [];
  fillLanguageSelect($("translate-source"), translation, { preferred: "eng_Latn" });
  fillLanguageSelect($("translate-target"), translation, { preferred: "zul_Latn" });
  const speech = ((capabilities.get("transcription") || {}).languages || []).filter((lang) => lang.supported);
  for (const select of document.querySelectorAll("[data-speech-languages]")) {
    fillLanguageSelect(select, speech, { detect: true });
  }
}

// --- text: entities, sentiment per sentence, language spans -------------------------------------------------------

/** ``text`` with the given [start, end) ranges wrapped in coloured marks. */
function highlight(container, text, ranges, key, label) {
  const assigned = new Map();
  const parts = [];
  let at = 0;
  for (const range of [...ranges].sort((a, b) => a.start - b.start)) {
    if (range.start < at) continue; // overlapping ranges: keep the first
    parts.push(text.slice(at, range.start));
    const name = key(range);
    parts.push(
      el(
        "mark",
        { style: { background: colourFor(name, assigned) }, dataset: { kind: name }, title: range.recogniser },
        text.slice(range.start, range.end),
        label ? el("span", { class: "tag" }, name) : null,
      ),
    );
    at = range.end;
  }
  parts.push(text.slice(at));
  container.replaceChildren(...parts);
  return assigned;
}

/** Per sentence: the language it was read as, with its confidence, whose recognisers read it, and what found
 * each of its entities. */
function showReadings(sentences, entities) {
  $("entity-sentences").tBodies[0].replaceChildren(
    ...sentences.map((sentence) => {
      const inside = entities.filter((e) => e.start >= sentence.start && e.end <= sentence.end);
      const others = sentence.candidates
        .slice(1)
        .map((c) => `${c.language} ${c.score.toFixed(2)}`)
        .join(", ");
      return el(
        "tr",
        { dataset: { language: sentence.language } },
        el("td", {}, sentence.text),
        el("td", {}, `${sentence.language} ${sentence.confidence.toFixed(2)}`, others ? ` (then ${others})` : ""),
        el("td", {}, sentence.read_as.join(", ")),
        el(
          "td",
          {},
          inside.length
            ? el("ul", {}, ...inside.map((e) => el("li", {}, `${e.word}: ${e.entity}, by ${e.recogniser}`)))
            : "none",
        ),
      );
    }),
  );
}

function setupText() {
  onSubmit($("text-form"), async () => {
    const text = $("text-input").value;
    const [entities, sentiment, language] = await Promise.allSettled([
      api("/api/v1/entity_recognition/explain", { method: "POST", json: { encoded_text: text } }),
      api("/api/v1/sentiment_analysis/process", { method: "POST", json: { encoded_text: text } }),
      api("/api/v1/language/detect", { method: "POST", json: { text, spans: true } }),
    ]);
    const failures = [entities, sentiment, language].filter((r) => r.status === "rejected");

    if (entities.status === "fulfilled") {
      const found = entities.value.entities;
      const types = highlight($("entities"), text, found, (e) => e.entity, true);
      legend($("entity-legend"), types);
      if (!found.length) $("entities").textContent = "No entities found.";
      showReadings(entities.value.sentences, found);
    }
    if (sentiment.status === "fulfilled") {
      $("sentiments").tBodies[0].replaceChildren(
        ...sentiment.value.Sentiments.map((sentence) => {
          const best = [...sentence.sentiment].sort((a, b) => b.score - a.score)[0] || { label: "?", score: 0 };
          return el(
            "tr",
            {},
            el("td", {}, sentence.text),
            el("td", {}, best.label),
            el(
              "td",
              {},
              el("span", { class: "bar", style: { width: `${Math.round(best.score * 80)}px` }, "aria-hidden": "true" }),
              ` ${best.score.toFixed(2)}`,
            ),
          );
        }),
      );
    }
    if (language.status === "fulfilled") {
      const found = language.value;
      $("language-summary").textContent = `${found.language} (${found.nllb_code}), confidence ${found.confidence.toFixed(2)}`;
      const spans = found.spans.length ? found.spans : [{ start: 0, end: text.length, language: found.language }];
      legend($("language-legend"), highlight($("language-spans"), text, spans, (s) => s.language, false));
    }
    if (failures.length) throw failures[0].reason;
  });
}

// --- translate ----------------------------------------------------------------------------------------------------

function setupTranslate() {
  onSubmit($("translate-form"), async () => {
    $("translation").textContent = "";
    const answer = await api("/api/v1/translate/process", {
      method: "POST",
      json: {
        input_text: $("translate-input").value,
        source_lang: $("translate-source").value,
        target_lang: $("translate-target").value,
      },
    });
    $("translation").textContent = answer.translation.map((t) => t.translated_text).join("\n");
  });
}

// --- intent -------------------------------------------------------------------------------------------------------

const EXAMPLES = [
  ["pay_account", "I would like to pay my bill"],
  ["pay_account", "How do I settle my account?"],
  ["find_branch", "Where is your office?"],
  ["find_branch", "Which branch is closest to me?"],
];

function exampleRow(intent = "", example = "") {
  const row = el("tr");
  row.append(
    el("td", {}, el("input", { "aria-label": "Intent", value: intent, required: true, class: "intent" })),
    el("td", {}, el("input", { "aria-label": "Example", value: example, required: true, class: "example" })),
    el("td", {}, el("button", { type: "button", class: "link", "aria-label": "Remove this example", onclick: () => row.remove() }, "Remove")),
  );
  return row;
}

function setupIntent() {
  const body = $("intent-examples").tBodies[0];
  body.replaceChildren(...EXAMPLES.map(([intent, example]) => exampleRow(intent, example)));
  $("intent-add").addEventListener("click", () => {
    const row = exampleRow();
    body.append(row);
    row.querySelector("input").focus();
  });
  onSubmit($("intent-form"), async () => {
    const examples = [...body.rows].map((row) => ({
      intent: row.querySelector(".intent").value.trim(),
      example: row.querySelector(".example").value.trim(),
    }));
    const inputs = $("intent-inputs").value.split("\n").map((line) => line.trim()).filter(Boolean);
    const answer = await api("/api/v1/classify", { method: "POST", json: { examples, inputs } });
    $("intent-results").replaceChildren(
      ...answer.map((result, index) =>
        el(
          "div",
          { class: "intent-result" },
          el("h3", {}, inputs[index]),
          el(
            "ul",
            {},
            [...result.probabilities]
              .sort((a, b) => b.score - a.score)
              .map((p) =>
                el(
                  "li",
                  {},
                  el("span", { class: "bar", style: { width: `${Math.round(p.score * 120)}px` }, "aria-hidden": "true" }),
                  ` ${p.intent} ${p.score.toFixed(2)}`,
                ),
              ),
          ),
        ),
      ),
    );
  });
}

// --- knowledge bases ----------------------------------------------------------------------------------------------

let knowledgeBases = [];

function selectedKnowledgeBase() {
  return knowledgeBases.find((kb) => kb.id === $("kb-select").value);
}

function renderDocuments() {
  const kb = selectedKnowledgeBase();
  $("kb-documents").replaceChildren(
    ...(kb ? kb.documents : []).map((doc) =>
      el(
        "li",
        {},
        doc.filename,
        " ",
        el(
          "button",
          {
            type: "button",
            class: "link",
            "aria-label": `Delete ${doc.filename}`,
            onclick: () => guarded($("panel-kb"), async () => {
              await api(`/api/v1/search/knowledgebase/document/${encodeURIComponent(doc.id)}`, { method: "DELETE" });
              await refreshKnowledgeBases();
            }),
          },
          "Delete",
        ),
      ),
    ),
  );
  if (kb && !kb.documents.length) $("kb-documents").append(el("li", { class: "help" }, "No documents yet."));
}

let listings = 0;
let latestListing = Promise.resolve();
let wantedSelection = null; // a knowledge base to select when a listing lands, even a later listing

/** Lists the knowledge bases; resolves once the newest listing (this one or a later one) is on screen. */
function refreshKnowledgeBases(select) {
  if (!token()) return Promise.resolve();
  if (select) wantedSelection = select;
  const mine = ++listings;
  const listing = api("/api/v1/search/knowledgebases").then((listed) => {
    if (mine !== listings) return latestListing; // a later listing (after a create or an upload) applies instead
    showKnowledgeBases(listed);
    return undefined;
  });
  latestListing = listing;
  return listing;
}

function showKnowledgeBases(listed) {
  knowledgeBases = listed;
  const keep = wantedSelection || $("kb-select").value;
  wantedSelection = null;
  $("kb-select").replaceChildren(
    ...knowledgeBases.map((kb) =>
      el("option", { value: kb.id, selected: kb.id === keep }, `${kb.knowledgebase_name} (${kb.documents.length} documents)`),
    ),
  );
  if (!knowledgeBases.length) $("kb-select").append(el("option", { value: "" }, "No knowledge bases yet: create one"));
  renderDocuments();
}

async function guarded(panel, work) {
  showError(panel, null);
  try {
    await work();
  } catch (error) {
    showError(panel, error);
  }
}

async function uploadDocuments(files) {
  const panel = $("panel-kb");
  const kb = selectedKnowledgeBase();
  if (!kb) {
    panel.querySelector("[data-error]").textContent = "Create or choose a knowledge base first.";
    return;
  }
  const progress = $("kb-progress");
  progress.hidden = false;
  await guarded(panel, async () => {
    for (const [index, file] of [...files].entries()) {
      $("kb-status").textContent = `Uploading ${file.name} (${index + 1} of ${files.length})…`;
      progress.value = 0;
      const answer = await upload(`/api/v1/search/knowledgebase/${encodeURIComponent(kb.id)}/document`, file, (f) => {
        progress.value = f;
      });
      $("kb-status").textContent = answer.duplicate
        ? `${answer.filename} was already in this knowledge base.`
        : `${answer.filename} is uploaded and searchable.`;
    }
    await refreshKnowledgeBases(kb.id);
  });
  progress.hidden = true;
}

function setupDropZone(zone, onFiles) {
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    if (event.dataTransfer && event.dataTransfer.files.length) onFiles(event.dataTransfer.files);
  });
}

function setupKnowledgeBases() {
  const panel = $("panel-kb");
  onSubmit($("kb-create-form"), async () => {
    const created = await api("/api/v1/search/knowledgebase", {
      method: "POST",
      json: { knowledgebase_name: $("kb-name").value.trim() },
    });
    $("kb-name").value = "";
    await refreshKnowledgeBases(created.id);
    // said only once it is listed and selected, so a file dropped on hearing it goes into it
    $("kb-status").textContent = `Created ${created.knowledgebase_name}.`;
  });
  $("kb-select").addEventListener("change", renderDocuments);
  $("kb-refresh").addEventListener("click", () => guarded(panel, () => refreshKnowledgeBases()));
  $("kb-delete").addEventListener("click", () =>
    guarded(panel, async () => {
      const kb = selectedKnowledgeBase();
      if (!kb || !window.confirm(`Delete ${kb.knowledgebase_name} and its ${kb.documents.length} documents?`)) return;
      await api(`/api/v1/search/knowledgebase/${encodeURIComponent(kb.id)}`, { method: "DELETE" });
      $("kb-status").textContent = `Deleted ${kb.knowledgebase_name}.`;
      await refreshKnowledgeBases();
    }),
  );
  setupDropZone($("kb-drop"), uploadDocuments);
  $("kb-files").addEventListener("change", (event) => {
    const files = [...event.target.files];
    event.target.value = "";
    uploadDocuments(files);
  });
  onSubmit($("kb-query-form"), async () => {
    const kb = selectedKnowledgeBase();
    if (!kb) throw new Error("create or choose a knowledge base first");
    const answer = await api(`/api/v1/search/knowledgebase/${encodeURIComponent(kb.id)}/query`, {
      method: "POST",
      json: { query: $("kb-query").value, top_k: Number($("kb-topk").value) || 5 },
    });
    $("kb-results").replaceChildren(
      ...answer.search_result.map((hit) =>
        el(
          "li",
          {},
          el("p", { class: "passage" }, hit.text),
          el(
            "p",
            { class: "meta" },
            `score ${hit.score.toFixed(3)}`,
            hit.filename ? ` · ${hit.filename}` : "",
            hit.language ? ` · ${hit.language}` : "",
          ),
        ),
      ),
    );
    if (!answer.search_result.length) $("kb-results").append(el("li", {}, "No passages found."));
  });
}

// --- transcribe a file: timeline with speakers and music, playable words ----------------------------------------

function setupTranscribe() {
  const audio = $("transcribe-audio");
  const input = $("transcribe-file");
  setupDropZone($("transcribe-drop"), (files) => {
    const transfer = new DataTransfer();
    transfer.items.add(files[0]);
    input.files = transfer.files;
  });
  const seek = (seconds) => {
    audio.currentTime = seconds;
    audio.play().catch(() => {}); // a browser without sound output still seeks
  };
  let words = [];
  audio.addEventListener("timeupdate", () => {
    for (const word of words) {
      const now = audio.currentTime;
      word.classList.toggle("current", now >= Number(word.dataset.start) && now < Number(word.dataset.end));
    }
  });

  onSubmit($("transcribe-form"), async () => {
    const file = input.files[0];
    const form = new FormData();
    form.append("file", file, file.name);
    $("transcribe-status").textContent = `Transcribing ${file.name}…`;
    if (audio.src) URL.revokeObjectURL(audio.src);
    audio.src = URL.createObjectURL(file);
    let record;
    try {
      record = await api("/api/v2alpha/transcribe/sync/file", {
        method: "POST",
        form,
        params: {
          lang_code: $("transcribe-lang").value,
          diarise: $("transcribe-diarise").checked,
          detect_music: $("transcribe-music").checked,
        },
      });
    } catch (error) {
      $("transcribe-status").textContent = "";
      throw error;
    }
    const warnings = (record.warnings || []).join(" ");
    $("transcribe-status").textContent =
      `${record.audio_length_seconds.toFixed(1)} s of audio, language ${record.language_code || "?"}` +
      (record.processing_seconds ? `, transcribed in ${record.processing_seconds.toFixed(1)} s` : "") +
      (warnings ? `. ${warnings}` : "");

    const speakers = new Map();
    const length = record.audio_length_seconds || 1;
    const timeline = record.diarisation_result.timeline || [];
    $("timeline").replaceChildren(
      ...timeline.map((item) => {
        const who = item.type === "speech" ? item.speaker_id || "speech" : item.type;
        const label = `${who}, ${item.start_time.toFixed(1)} to ${item.end_time.toFixed(1)} s`;
        return el("button", {
          type: "button",
          class: item.type,
          title: label,
          "aria-label": label,
          dataset: { type: item.type, speaker: item.speaker_id || "" },
          style: {
            left: `${(100 * item.start_time) / length}%`,
            width: `${(100 * (item.end_time - item.start_time)) / length}%`,
            ...(item.type === "speech" ? { background: colourFor(who, speakers) } : {}),
          },
          onclick: () => seek(item.start_time),
        });
      }),
    );
    legend($("timeline-legend"), speakers);
    if (timeline.some((item) => item.type === "music")) $("timeline-legend").append(el("li", {}, "striped: music"));

    words = (record.words || []).map((word) =>
      el(
        "button",
        {
          type: "button",
          class: "word",
          title: `${word.start_time.toFixed(2)} s${word.speaker_id ? `, ${word.speaker_id}` : ""}`,
          dataset: { start: word.start_time, end: word.end_time },
          style: word.speaker_id ? { borderBottomColor: colourFor(word.speaker_id, speakers) } : {},
          onclick: () => seek(word.start_time),
        },
        word.word.trim(),
      ),
    );
    if (words.length) $("transcript").replaceChildren(...words);
    else $("transcript").textContent = record.transcription_text || "(no speech)";
  });
}

// --- live: the microphone to the Live API (/v1/realtime) -----------------------------------------------------------

/** An ArrayBuffer as base64 (the Live API carries audio in JSON events). */
function base64Of(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

function setupLive() {
  const panel = $("panel-live");
  const status = $("live-status");
  let session = null;

  const stopMicrophone = () => {
    if (!session) return;
    session.stream.getTracks().forEach((track) => track.stop());
    session.context.close().catch(() => {});
  };

  const finish = () => {
    stopMicrophone();
    session = null;
    $("live-start").disabled = false;
    $("live-stop").disabled = true;
  };

  // The transcript is the deltas joined; the completed segments are its first part (black), the rest is still
  // being spoken (grey). Nothing shown is ever taken back.
  const show = (current) => {
    $("live-final").textContent = current.transcript.slice(0, current.completed);
    $("live-partial").textContent = current.transcript.slice(current.completed).trim();
  };

  $("live-start").addEventListener("click", async () => {
    showError(panel, null);
    if (!token()) {
      panel.querySelector("[data-error]").textContent = "Paste your API token above and sign in first.";
      return;
    }
    $("live-start").disabled = true;
    $("live-final").textContent = "";
    $("live-partial").textContent = "";
    $("live-language").textContent = "–";
    let microphone = null; // until a session holds it
    try {
      const stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
      });
      const context = new AudioContext({ sampleRate: 16000 });
      microphone = { stream, context };
      await context.audioWorklet.addModule("/playground/pcm-worklet.js");
      const frames = new AudioWorkletNode(context, "pcm-frames");
      context.createMediaStreamSource(stream).connect(frames);
      frames.connect(context.destination); // pulled by the graph; the worklet writes no output (silence)

      // The token stays in this page: a one-session secret, minted with it, opens the WebSocket.
      const input = { format: { type: "audio/pcm", rate: context.sampleRate } };
      if ($("live-lang").value) input.transcription = { language: $("live-lang").value };
      const body = { session: { audio: { input } } };
      const secret = await api("/v1/realtime/client_secrets", { method: "POST", json: body });
      const url = new URL("/v1/realtime", window.location.href);
      url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
      const socket = new WebSocket(url, ["realtime", `vulavula-insecure-api-key.${secret.value}`]);
      session = { stream, context, socket, ready: false, queued: [], ended: false, closedSeen: false };
      session.transcript = ""; // the deltas joined
      session.completed = 0; // how much of it the completed segments cover
      const current = session;
      const append = (frame) =>
        socket.send(JSON.stringify({ type: "session.input_audio_buffer.append", audio: base64Of(frame) }));
      const close = () => socket.send(JSON.stringify({ type: "session.close" }));

      frames.port.onmessage = (event) => {
        if (current.ended) return;
        if (current.ready && socket.readyState === WebSocket.OPEN) append(event.data);
        else current.queued.push(event.data);
      };
      socket.addEventListener("message", (event) => {
        const message = JSON.parse(event.data);
        if (message.type === "session.created") {
          current.ready = true;
          current.queued.splice(0).forEach(append);
          if (current.ended) close();
          const language = message.session.audio.input.transcription.language;
          if (language) $("live-language").textContent = language;
          status.textContent = "Listening… speak, then press Stop.";
          $("live-stop").disabled = false;
        } else if (message.type === "session.input_transcript.delta") {
          current.transcript += message.delta;
          show(current);
        } else if (message.type === "session.input_transcript.completed") {
          if (message.text) current.completed += (current.completed ? 1 : 0) + message.text.length;
          if (message.language) $("live-language").textContent = message.language;
          show(current);
        } else if (message.type === "session.closed") {
          current.closedSeen = true;
          current.completed = current.transcript.length;
          show(current);
          if (message.language) $("live-language").textContent = message.language;
          status.textContent = `Done: ${message.audio_seconds.toFixed(1)} s of audio.`;
        } else if (message.type === "error") {
          panel.querySelector("[data-error]").textContent = message.error.message;
        }
      });
      socket.addEventListener("close", (event) => {
        if (!current.closedSeen && !panel.querySelector("[data-error]").textContent) {
          panel.querySelector("[data-error]").textContent =
            `The session closed before the transcript was finished ` +
            `(code ${event.code}${event.reason ? `: ${event.reason}` : ""}).`;
        }
        if (session === current) finish();
      });
      status.textContent = "Connecting…";
    } catch (error) {
      const message =
        error instanceof ApiError ? explain(error) : `The microphone or the session failed: ${error.message}`;
      panel.querySelector("[data-error]").textContent = message;
      if (!session && microphone) {
        microphone.stream.getTracks().forEach((track) => track.stop());
        microphone.context.close().catch(() => {});
      }
      finish();
    }
  });

  $("live-stop").addEventListener("click", () => {
    if (!session) return;
    session.ended = true;
    stopMicrophone();
    $("live-stop").disabled = true;
    status.textContent = "Finishing the transcript…";
    if (session.ready && session.socket.readyState === WebSocket.OPEN) {
      session.socket.send(JSON.stringify({ type: "session.close" }));
    }
  });
}

// --- start --------------------------------------------------------------------------------------------------------

setupTabs();
setupSignIn();
setupText();
setupTranslate();
setupIntent();
setupKnowledgeBases();
setupTranscribe();
setupLive();
loadModels();
refreshKnowledgeBases().catch((error) => showError($("panel-kb"), error));
document.body.dataset.ready = "true";
