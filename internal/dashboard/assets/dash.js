// The dashboard's charts: every silo's samples from /ui/series.json (one
// time axis, one line per silo), drawn with uPlot, fetched again every 5
// seconds while the page is visible.
"use strict";
(function () {
  const ids = ["chart-act", "chart-rate", "chart-lat"];
  if (!document.getElementById(ids[0]) || typeof uPlot === "undefined") return;
  const colors = ["#2563eb", "#15803d", "#b91c1c", "#7c3aed", "#c2410c", "#0e7490", "#a16207", "#be185d"];
  const plots = {};
  let shape = "";
  // lines lists a chart's lines: [label, stroke, dash, values].
  const lines = {
    "chart-act": s => s.map((x, i) => [x.silo, colors[i % colors.length], null, x.activations]),
    "chart-rate": s => s.map((x, i) => [x.silo, colors[i % colors.length], null, x.rate]),
    "chart-lat": s => s.flatMap((x, i) => [
      [x.silo + " p50", colors[i % colors.length], null, x.p50],
      [x.silo + " p99", colors[i % colors.length], [4, 3], x.p99]]),
  };
  function draw(d) {
    const silos = d.silos || [];
    const now = silos.map(x => x.silo).join(",");
    if (now !== shape) { // the members changed: new charts
      for (const id of ids) {
        if (plots[id]) { plots[id].destroy(); delete plots[id]; }
      }
      shape = now;
    }
    for (const id of ids) {
      const ls = lines[id](silos);
      const cols = [d.t || []].concat(ls.map(l => l[3]));
      if (!plots[id]) {
        const series = [{}].concat(ls.map(l => ({ label: l[0], stroke: l[1], dash: l[2] || undefined, spanGaps: true })));
        plots[id] = new uPlot({ width: 370, height: 160, legend: { show: true }, scales: { x: { time: true } },
          series: series, axes: [{}, { size: 50 }] }, cols, document.getElementById(id));
      } else {
        plots[id].setData(cols);
      }
    }
    document.body.dataset.charted = String((d.t || []).length);
    document.body.dataset.silos = silos.filter(x => x.activations.some(v => v !== null)).map(x => x.silo).join(",");
  }
  function load() {
    if (document.hidden) return;
    fetch("/ui/series.json", { credentials: "same-origin" })
      .then(r => r.ok ? r.json() : Promise.reject(r.status))
      .then(draw)
      .catch(() => {});
  }
  load();
  setInterval(load, 5000);
})();
