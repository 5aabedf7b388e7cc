// The console's only script: the overview refreshes itself, and the item page draws its chart.
(function () {
  "use strict";

  // Overview: fetch the body every 5 s and swap it in (not while the tab is hidden).
  var ov = document.getElementById("overview");
  if (ov && ov.dataset.refresh) {
    setInterval(function () {
      if (document.hidden) return;
      fetch(ov.dataset.refresh, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { if (!r.ok) throw new Error("overview: " + r.status); return r.text(); })
        .then(function (html) { ov.innerHTML = html; ov.dataset.refreshed = String(Date.now()); })
        .catch(function () { /* keep the last view; the next tick retries */ });
    }, 5000);
  }

  // Item page: the lowest unit price and the units sold over time, with uPlot.
  var el = document.getElementById("chart");
  if (el && el.dataset.src) {
    fetch(el.dataset.src, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("chart: HTTP " + r.status); return r.json(); })
      .then(function (d) { draw(el, d); })
      .catch(function (e) { note(el, "The chart could not be loaded (" + e.message + ")."); });
  }

  function note(el, text) {
    var p = document.getElementById("chart-note");
    if (p) p.textContent = text;
  }

  function draw(el, d) {
    el.dataset.points = String(d.t.length);
    el.dataset.source = d.source;
    if (d.t.length === 0) { note(el, "No history stored in this span yet."); return; }
    var p = document.getElementById("chart-note");
    if (p) p.textContent = "From " + d.source + ", last 7 days (UTC).";
    var width = Math.max(320, el.clientWidth || 900);
    var opts = {
      width: width, height: 320,
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
      scales: { x: { time: true }, price: { auto: true }, vol: { auto: true, range: function (u, lo, hi) { return [0, Math.max(1, hi) * 3]; } } },
      series: [
        {},
        { label: "lowest unit price", scale: "price", stroke: "#0969da", width: 2, spanGaps: false },
        { label: "units sold", scale: "vol", stroke: "#9a6700", fill: "rgba(154,103,0,0.25)", paths: uPlot.paths.bars({ size: [0.6, 12] }) }
      ],
      axes: [{}, { scale: "price", label: "price" }, { scale: "vol", side: 1, grid: { show: false }, label: "sold" }]
    };
    var u = new uPlot(opts, [d.t, d.price, d.volume], el);
    window.consoleChart = u;
  }
})();
