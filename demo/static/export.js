// The exported race page's player (demo/runs/export.py). Constant text (its hash is in the CSP): the data
// comes only from #race-data.
(() => {
  // biome-ignore lint/suspicious/noRedundantUseStrict: a classic inline script, not a module
  "use strict";
  const data = JSON.parse(document.getElementById("race-data").textContent);
  const player = data.player;
  // The panes in order: "baseline", "speculative" (the first arm), then each other arm by its pane key (demo.view.pane_key).
  const SIDES = player.panes;
  const $ = (id) => document.getElementById(id);
  const next = {};
  const callsShown = {};
  let timer = 0, t0 = 0, run = 0;

  function seconds(s) {
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    return `${s < 10 ? s.toFixed(2) : s.toFixed(1)} s`;
  }
  function status(side, state, text) {
    const el = $(`status-${side}`);
    el.dataset.state = state;
    el.textContent = text;
  }
  function reset() {
    clearTimeout(timer);
    for (const side of SIDES) {
      $(`text-${side}`).replaceChildren();
      next[side] = 0;
      callsShown[side] = false;
      $(`tokens-${side}`).textContent = player.sides[side].tokens_known ? "0" : "n/a";
      $(`elapsed-${side}`).textContent = seconds(0);
      status(side, "waiting", "waiting for the first token\u2026");
      $(`live-${side}`).hidden = false;
      $(`final-${side}`).hidden = true;
    }
    $("final").hidden = true;
    document.documentElement.dataset.state = "playing";
  }
  function step(now) {
    for (const side of SIDES) {
      const sd = player.sides[side], body = $(`text-${side}`);
      let i = next[side];
      while (i < sd.chunks.length && sd.chunks[i][0] <= now) {
        const [, tokens, running, cls, text] = sd.chunks[i];
        if (text && cls) {
          const span = document.createElement("span");
          span.className = cls;
          span.title = `${tokens} tokens in one step`;
          span.textContent = text;
          body.append(span);
        } else if (text) {
          body.append(document.createTextNode(text));
        }
        if (running !== null) $(`tokens-${side}`).textContent = String(running);
        i += 1;
      }
      if (!callsShown[side] && sd.tool_calls.length && now >= sd.tool_calls_s) {
        // The answer's tool calls after its text, as the page shows them (demo/view.py tool_calls_html).
        sd.tool_calls.forEach(([name, args], n) => {
          const block = document.createElement("div");
          block.className = "sd-tool-call";
          block.dataset.toolCall = String(n);
          const label = document.createElement("span");
          label.className = "sd-tool-call-label";
          label.textContent = "tool call";
          const fn = document.createElement("span");
          fn.className = "sd-tool-name";
          fn.textContent = name || "n/a";
          const code = document.createElement("code");
          code.className = "sd-tool-args";
          code.textContent = args;
          block.append(label, document.createTextNode(" "), fn, code);
          body.append(block);
        });
        callsShown[side] = true;
        body.scrollTop = body.scrollHeight;
      }
      if (i > next[side]) body.scrollTop = body.scrollHeight;
      next[side] = i;
      $(`elapsed-${side}`).textContent = seconds(Math.min(now, sd.end_s));
      if (now >= sd.end_s) status(side, sd.end_state, sd.end_text);
      else if (i > 0) status(side, "streaming", "streaming");
    }
  }
  function finish() {
    clearTimeout(timer);
    step(Infinity);
    for (const side of SIDES) {
      $(`live-${side}`).hidden = true;
      $(`final-${side}`).hidden = false;
    }
    $("final").hidden = false;
    document.documentElement.dataset.state = "finished";
  }
  function tick(id) {
    if (id !== run) return;
    const now = (performance.now() - t0) / 1000;
    if (now >= player.duration_s) { finish(); return; }
    step(now);
    timer = setTimeout(() => tick(id), 30);
  }
  function play() {
    run += 1;
    reset();
    t0 = performance.now();
    tick(run);
  }
  for (const [role, content] of player.prompt) {
    const line = document.createElement("div");
    const who = document.createElement("b");
    who.textContent = `${role}: `;
    line.append(who, document.createTextNode(content));
    $("prompt").append(line);
  }
  $("replay").addEventListener("click", play);
  $("skip").addEventListener("click", () => { run += 1; finish(); });
  play();
})();
