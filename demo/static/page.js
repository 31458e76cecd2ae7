// The page's own script: keys and the stall notice. demo/ui/app.py (launch_js) runs it, with
// booth.js in booth mode, inside one function once the page has loaded, SD_STALL_NOTICE_S set
// from SPECDEMO_UI_STALL_NOTICE_S.

// Ctrl+Enter starts a race, Escape stops it, from anywhere on the page. Start (the button or
// the key) does nothing more while this page's race waits or runs, or was just asked for and
// the app has not answered yet (the app refuses such a press too: demo.live.session).
let sdChanges = 0;  // updates of the status line seen so far
let sdPressed = null;  // [sdChanges when Start was last let through, when]
const sdWatch = () => {
  const el = document.getElementById('sd-run-status');
  if (el && !el.sdWatched) {
    el.sdWatched = true;
    new MutationObserver(() => { sdChanges += 1; })
      .observe(el, {childList: true, subtree: true, characterData: true, attributes: true});
  }
};
const sdBusy = () => {
  const s = document.querySelector('#sd-run-status .sd-run-status');
  if (s && (s.dataset.state === 'waiting' || s.dataset.state === 'running')) return true;
  return sdPressed !== null && sdPressed[0] === sdChanges && Date.now() - sdPressed[1] < 5000;
};
document.addEventListener('click', (e) => {
  if (!(e.target instanceof Element) || !e.target.closest('#sd-start')) return;
  sdWatch();
  if (sdBusy()) { e.stopImmediatePropagation(); e.preventDefault(); return; }
  sdPressed = [sdChanges, Date.now()];
}, true);
document.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
    document.getElementById('sd-start')?.click(); e.preventDefault();
  }
  else if (e.key === 'Escape') { document.getElementById('sd-stop')?.click(); }
});

// While a race runs the app changes the race area at least once a second (tiles, or a
// "no token for N s" line when a server is silent). When nothing has arrived for
// SPECDEMO_UI_STALL_NOTICE_S the page, not the app, says so: the presenter is never left
// looking at a frozen "Racing…" (a lost connection to the app, or an app that stopped answering).
(() => {
  const LIMIT_MS = SD_STALL_NOTICE_S * 1000;
  let last = Date.now();
  const seen = new WeakSet();
  const watch = () => {
    // Every pane's status, tiles and text (the baseline's and each arm's: sd-tiles-<key>, ...).
    const panes = document.querySelectorAll('[id^="sd-tiles-"], [id^="sd-status-"], [id^="sd-text-"]');
    for (const el of [document.getElementById('sd-run-status'), ...panes]) {
      if (el && !seen.has(el)) {
        seen.add(el);
        new MutationObserver(() => { last = Date.now(); })
          .observe(el, {childList: true, subtree: true, characterData: true, attributes: true});
      }
    }
  };
  setInterval(() => {
    watch();
    const status = document.querySelector('#sd-run-status .sd-run-status');
    const running = status && status.dataset.state === 'running';
    let notice = document.getElementById('sd-stall');
    if (running && Date.now() - last > LIMIT_MS) {
      if (!notice) {
        notice = document.createElement('div');
        notice.id = 'sd-stall';
        notice.setAttribute('role', 'alert');
        document.body.appendChild(notice);
      }
      const s = Math.round((Date.now() - last) / 1000);
      notice.textContent = 'No update from the app for ' + s + ' s: the connection to it may be lost. ' +
        'If nothing changes, reload the page (saved runs are under Replay) and check the app is running.';
    } else if (notice) {
      notice.remove();
    }
  }, 1000);
})();
