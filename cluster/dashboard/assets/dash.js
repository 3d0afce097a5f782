// The dashboard's charts: this silo's samples from /ui/series.json, drawn
// with uPlot, fetched again every 5 seconds while the page is visible.
"use strict";
(function () {
  const ids = ["chart-act", "chart-rate", "chart-lat"];
  if (!document.getElementById(ids[0]) || typeof uPlot === "undefined") return;
  const plots = {};
  function opts(title, series) {
    return { width: 370, height: 140, legend: { show: true }, scales: { x: { time: true } },
      series: [{}].concat(series), axes: [{}, { size: 50 }] };
  }
  const defs = {
    "chart-act": [opts("activations", [{ label: "activations", stroke: "#2563eb" }]), p => [p.activations]],
    "chart-rate": [opts("messages/s", [{ label: "msg/s", stroke: "#15803d" }]), p => [p.rate]],
    "chart-lat": [opts("Ask latency", [{ label: "p50 ms", stroke: "#2563eb" }, { label: "p99 ms", stroke: "#b91c1c" }]), p => [p.p50, p.p99]],
  };
  function draw(points) {
    for (const id of ids) {
      const [o, pick] = defs[id];
      const cols = [points.map(p => p.t)];
      const n = pick(points[0] || { activations: 0, rate: 0, p50: 0, p99: 0 }).length;
      for (let i = 0; i < n; i++) cols.push(points.map(p => pick(p)[i]));
      if (!plots[id]) {
        plots[id] = new uPlot(o, cols, document.getElementById(id));
      } else {
        plots[id].setData(cols);
      }
    }
    document.body.dataset.charted = String(points.length);
  }
  function load() {
    if (document.hidden) return;
    fetch("/ui/series.json", { credentials: "same-origin" })
      .then(r => r.ok ? r.json() : Promise.reject(r.status))
      .then(d => draw(d.points || []))
      .catch(() => {});
  }
  load();
  setInterval(load, 5000);
})();
