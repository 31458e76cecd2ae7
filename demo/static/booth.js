// The page's side of booth mode (demo/ui/booth_view.py): the large layout while the show runs
// (the caption's data-state says whose turn it is), folded away at a visitor's first click or
// key, which also tells the app (at most once a second: each input pushes the show's return back
// by booth_idle_s; a 2 s throttle dropped an input made 2 s after the last whenever the browser
// ran the first one late).
(() => {
  const body = document.body;
  body.classList.add('sd-booth');
  let inputAt = 0, touchedAt = 0;
  const touch = (e) => {
    if (!e.isTrusted) return;  // the page's own clicks (Ctrl+Enter pressing Start) are not a visitor
    body.classList.remove('sd-booth');
    const now = Date.now();
    inputAt = now;
    if (now - touchedAt > 1000) {
      touchedAt = now;
      document.getElementById('sd-booth-touch')?.click();
    }
  };
  document.addEventListener('pointerdown', touch, true);
  document.addEventListener('keydown', touch, true);
  // The large layout while the show runs; an update of the show already on its way when the
  // visitor touched the page must not bring it back for a moment.
  setInterval(() => {
    const c = document.querySelector('#sd-booth-caption .sd-booth-caption');
    if (!c) return;
    const show = c.dataset.state !== 'visitor' && Date.now() - inputAt > 3000;
    if (show !== body.classList.contains('sd-booth')) body.classList.toggle('sd-booth', show);
    // A load turn: the load panel's curves take the race area's place.
    const load = show && c.dataset.turn === 'load';
    if (load !== body.classList.contains('sd-booth-load')) body.classList.toggle('sd-booth-load', load);
  }, 300);
})();
