// msmon plots: stacked canvas panels sharing one step axis (no dependencies, no network).
// Data: the JSON text of the element #msmon-data: {"panels": [...], "alerts": [...]}
// panel = {metric, label, series: [{name, color, x: [...], y: [...], nonfinite: [[step, kind]], total}]}
// alert = {n, step, severity, detector, message}; rollback = {step, until, label} (the report only);
// profile = {step, until, label, metrics}: a profiled window, shaded on its metrics' panels (the report only);
// panel.band = {x, low, high, label}: the references' band of that metric; parting = {step, metric, label} (labelled on its metric's panel)
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("msmon-data").textContent);
  const M = { left: 74, right: 18, top: 24, bottom: 26 };
  const HEIGHT = 190;
  const COLORS = { warning: "#d97706", critical: "#dc2626", nonfinite: "#b91c1c", grid: "#e5e7eb", axis: "#6b7280",
                   rollback: "#7c3aed", profile: "#0e7490", band: "rgba(22,163,74,0.14)", bandText: "#15803d", parting: "#15803d" };
  const ROLLBACKS = DATA.rollbacks || [];
  const PROFILES = DATA.profiles || [];
  const PARTINGS = DATA.partings || [];  // {step, metric, label}: where the run leaves its references' band
  const root = document.getElementById("msmon-plots");
  const more = document.getElementById("msmon-plots-more");
  const tip = document.getElementById("msmon-tip");
  const panels = [];
  let full = [Infinity, -Infinity];
  let view = null;
  let hoverStep = null;

  for (const p of DATA.panels) {
    for (const s of p.series) {
      for (const x of s.x) { if (x < full[0]) full[0] = x; if (x > full[1]) full[1] = x; }
      for (const m of s.nonfinite) { if (m[0] < full[0]) full[0] = m[0]; if (m[0] > full[1]) full[1] = m[0]; }
    }
  }
  for (const a of DATA.alerts) {
    if (a.step === null || a.step === undefined) continue;
    if (a.step < full[0]) full[0] = a.step;
    if (a.step > full[1]) full[1] = a.step;
  }
  if (!isFinite(full[0])) full = [0, 1];
  if (full[0] === full[1]) full = [full[0] - 1, full[1] + 1];
  view = full.slice();

  function niceTicks(lo, hi, count) {
    const span = hi - lo;
    if (!(span > 0)) return [lo];
    const raw = span / count;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
    return out;
  }

  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (!isFinite(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    if (a >= 100) return v.toFixed(0);
    return String(Number(v.toPrecision(4)));
  }

  function lowerBound(arr, value) {
    let lo = 0, hi = arr.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] < value) lo = mid + 1; else hi = mid; }
    return lo;
  }

  function nearest(s, step) {
    if (!s.x.length) return null;
    const i = lowerBound(s.x, step);
    let best = Math.min(i, s.x.length - 1);
    if (i > 0 && (i === s.x.length || Math.abs(s.x[i - 1] - step) <= Math.abs(s.x[i] - step))) best = i - 1;
    return best;
  }

  function element(tag, className) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  function makePanel(p) {
    const box = element("div", "panel");
    const head = element("div", "panel-head");
    const title = element("span", "panel-title");
    title.textContent = p.label;
    const readout = element("span", "readout");
    const logLabel = element("label", "logtoggle");
    const logBox = document.createElement("input");
    logBox.type = "checkbox";
    logLabel.appendChild(logBox);
    logLabel.appendChild(document.createTextNode(" log scale"));
    head.append(title, readout, logLabel);
    const canvas = document.createElement("canvas");
    canvas.setAttribute("data-metric", p.metric);
    box.append(head, canvas);
    (p.group === "more" && more ? more : root).appendChild(box);
    const panel = { p, canvas, readout, logBox, yr: [0, 1], log: false, w: 0 };
    logBox.addEventListener("change", function () { panel.log = logBox.checked; drawAll(); });
    attachMouse(panel);
    return panel;
  }

  function yRange(panel) {
    let lo = Infinity, hi = -Infinity;
    for (const s of panel.p.series) {
      const a = lowerBound(s.x, view[0]), b = lowerBound(s.x, view[1] + 1e-9);
      for (let i = Math.max(0, a - 1); i < Math.min(s.x.length, b + 1); i++) {
        const v = s.y[i];
        if (panel.log && !(v > 0)) continue;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
    const band = panel.p.band;
    if (band) {  // the band stays in view beside the curves
      const a = lowerBound(band.x, view[0]), b = lowerBound(band.x, view[1] + 1e-9);
      for (let i = a; i < b; i++) {
        if (!panel.log || band.low[i] > 0) lo = Math.min(lo, band.low[i]);
        hi = Math.max(hi, band.high[i]);
      }
    }
    if (!isFinite(lo)) return panel.log ? [0, 1] : [0, 1];
    if (panel.log) { lo = Math.log10(lo); hi = Math.log10(hi); }
    if (lo === hi) { const d = Math.abs(lo) * 0.05 || 1; lo -= d; hi += d; }
    const pad = (hi - lo) * 0.06;
    return [lo - pad, hi + pad];
  }

  function draw(panel) {
    const c = panel.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.parentElement.clientWidth;
    if (w === 0) return;  // inside a closed <details>: drawn when opened
    c.style.width = w + "px";
    c.style.height = HEIGHT + "px";
    c.width = Math.round(w * dpr);
    c.height = Math.round(HEIGHT * dpr);
    panel.w = w;
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, HEIGHT);
    const pw = w - M.left - M.right, ph = HEIGHT - M.top - M.bottom;
    panel.yr = yRange(panel);
    const yr = panel.yr;
    const X = (s) => M.left + (s - view[0]) / (view[1] - view[0]) * pw;
    const Y = (v) => {
      const t = panel.log ? Math.log10(v) : v;
      return M.top + ph - (t - yr[0]) / (yr[1] - yr[0]) * ph;
    };
    panel.X = X;
    g.font = "11px system-ui, sans-serif";
    g.strokeStyle = COLORS.grid;
    g.fillStyle = COLORS.axis;
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    for (const t of niceTicks(yr[0], yr[1], 4)) {
      const yy = M.top + ph - (t - yr[0]) / (yr[1] - yr[0]) * ph;
      g.beginPath(); g.moveTo(M.left, yy); g.lineTo(M.left + pw, yy); g.stroke();
      g.fillText(panel.log ? fmt(Math.pow(10, t)) : fmt(t), M.left - 6, yy);
    }
    g.textAlign = "center";
    g.textBaseline = "top";
    for (const t of niceTicks(view[0], view[1], Math.max(2, Math.floor(pw / 90)))) {
      const xx = X(t);
      g.beginPath(); g.moveTo(xx, M.top); g.lineTo(xx, M.top + ph); g.stroke();
      const label = fmt(t);
      const half = g.measureText(label).width / 2;
      g.fillText(label, Math.min(xx, w - half - 2), M.top + ph + 6);
    }
    g.strokeStyle = COLORS.axis;
    g.strokeRect(M.left, M.top, pw, ph);
    g.save();
    g.beginPath(); g.rect(M.left, M.top - 14, pw, ph + 14); g.clip();
    const band = panel.p.band;
    if (band && band.x.length) {  // the references' band, under the curves
      const a = Math.max(0, lowerBound(band.x, view[0]) - 1), b = Math.min(band.x.length, lowerBound(band.x, view[1]) + 1);
      const ok = (i) => !panel.log || (band.low[i] > 0 && band.high[i] > 0);
      g.fillStyle = COLORS.band;
      g.beginPath();
      let started = false;
      for (let i = a; i < b; i++) { if (!ok(i)) continue; const xx = X(band.x[i]), yy = Y(band.high[i]); if (started) g.lineTo(xx, yy); else { g.moveTo(xx, yy); started = true; } }
      for (let i = b - 1; i >= a; i--) { if (ok(i)) g.lineTo(X(band.x[i]), Y(band.low[i])); }
      g.closePath();
      g.fill();
      g.fillStyle = COLORS.bandText;
      g.font = "10px system-ui, sans-serif";
      g.textAlign = "right";
      g.textBaseline = "bottom";
      g.fillText(band.label, M.left + pw - 4, M.top + ph - 2);
    }
    for (const s of panel.p.series) {
      const a = Math.max(0, lowerBound(s.x, view[0]) - 1), b = Math.min(s.x.length, lowerBound(s.x, view[1]) + 1);
      g.strokeStyle = s.color;
      g.lineWidth = 1.4;
      g.beginPath();
      let pen = false;
      for (let i = a; i < b; i++) {
        const v = s.y[i];
        if (panel.log && !(v > 0)) { pen = false; continue; }
        const xx = X(s.x[i]), yy = Y(v);
        if (pen) g.lineTo(xx, yy); else { g.moveTo(xx, yy); pen = true; }
      }
      g.stroke();
      if (b - a < 120) {
        g.fillStyle = s.color;
        for (let i = a; i < b; i++) {
          if (panel.log && !(s.y[i] > 0)) continue;
          g.beginPath(); g.arc(X(s.x[i]), Y(s.y[i]), 2.2, 0, 2 * Math.PI); g.fill();
        }
      }
      for (const m of s.nonfinite) {
        if (m[0] < view[0] || m[0] > view[1]) continue;
        const xx = X(m[0]);
        const top = m[1] !== "-inf";
        g.strokeStyle = COLORS.nonfinite;
        g.setLineDash([2, 2]);
        g.beginPath(); g.moveTo(xx, M.top); g.lineTo(xx, M.top + ph); g.stroke();
        g.setLineDash([]);
        g.fillStyle = COLORS.nonfinite;
        const yy = top ? M.top + 1 : M.top + ph - 1;
        const d = top ? 8 : -8;
        g.beginPath(); g.moveTo(xx - 5, yy); g.lineTo(xx + 5, yy); g.lineTo(xx, yy + d); g.closePath(); g.fill();
        g.font = "bold 10px system-ui, sans-serif";
        g.textAlign = "left";
        g.textBaseline = top ? "top" : "bottom";
        g.fillText(m[1] === "nan" ? "NaN" : m[1] === "inf" ? "+Inf" : "-Inf", xx + 6, top ? yy : yy);
      }
    }
    // a stretch of steps, shaded and labelled at its start
    function shade(from, until, fill, color, label, dy) {
      if (until < view[0] || from > view[1]) return;
      const x0 = X(Math.max(from, view[0])), x1 = X(Math.min(until, view[1]));
      g.fillStyle = fill;
      g.fillRect(x0, M.top, Math.max(x1 - x0, 2), ph);
      g.fillStyle = color;
      g.font = "10px system-ui, sans-serif";
      g.textAlign = "left";
      g.textBaseline = "top";
      g.fillText(label, x0 + 3, M.top + dy);
    }
    for (const r of ROLLBACKS) {  // the stretch trained again after a rollback, on data past the skipped batches
      shade(r.step, r.until, "rgba(124,58,237,0.10)", COLORS.rollback, "\u21ba " + r.label, 2);
    }
    for (const w of PROFILES) {  // a profiled window: its steps ran under the profiler
      if (w.metrics.indexOf(panel.p.metric) >= 0) shade(w.step, w.until, "rgba(14,116,144,0.14)", COLORS.profile, w.label, 26);
    }
    for (const m of PARTINGS) {  // the first step outside the band
      if (m.step < view[0] || m.step > view[1]) continue;
      const xx = X(m.step);
      g.strokeStyle = COLORS.parting;
      g.lineWidth = 1.5;
      g.setLineDash([1, 3]);
      g.beginPath(); g.moveTo(xx, M.top); g.lineTo(xx, M.top + ph); g.stroke();
      g.setLineDash([]);
      g.lineWidth = 1;
      g.fillStyle = COLORS.parting;
      g.font = "10px system-ui, sans-serif";
      g.textAlign = "left";
      g.textBaseline = "top";
      if (m.metric === panel.p.metric) g.fillText("\u2192 " + m.label + " @ " + m.step, xx + 3, M.top + 14);
    }
    for (const a of DATA.alerts) {
      if (a.step === null || a.step === undefined || a.step < view[0] || a.step > view[1]) continue;
      const xx = X(a.step);
      const col = a.severity === "critical" ? COLORS.critical : COLORS.warning;
      g.strokeStyle = col;
      g.setLineDash([5, 3]);
      g.beginPath(); g.moveTo(xx, M.top); g.lineTo(xx, M.top + ph); g.stroke();
      g.setLineDash([]);
      g.fillStyle = col;
      g.fillRect(xx - 8, M.top - 14, 16, 13);
      g.fillStyle = "#fff";
      g.font = "bold 10px system-ui, sans-serif";
      g.textAlign = "center";
      g.textBaseline = "middle";
      g.fillText(String(a.n), xx, M.top - 7.5);
    }
    g.restore();
    if (hoverStep !== null && hoverStep >= view[0] && hoverStep <= view[1]) {
      g.strokeStyle = "rgba(17,24,39,0.45)";
      g.beginPath(); g.moveTo(X(hoverStep), M.top); g.lineTo(X(hoverStep), M.top + ph); g.stroke();
    }
    if (panel.sel) {
      g.fillStyle = "rgba(37,99,235,0.15)";
      g.fillRect(Math.min(panel.sel[0], panel.sel[1]), M.top, Math.abs(panel.sel[1] - panel.sel[0]), ph);
    }
    updateReadout(panel);
  }

  function updateReadout(panel) {
    if (hoverStep === null) { panel.readout.textContent = ""; return; }
    const parts = [];
    for (const s of panel.p.series) {
      const i = nearest(s, hoverStep);
      if (i === null) continue;
      const prefix = panel.p.series.length > 1 ? s.name + " " : "";
      parts.push(prefix + "step " + s.x[i] + ": " + fmt(s.y[i]));
    }
    panel.readout.textContent = parts.join("   ");
  }

  function stepAt(panel, px) {
    const pw = panel.w - M.left - M.right;
    return view[0] + (px - M.left) / pw * (view[1] - view[0]);
  }

  function alertNear(panel, px) {
    let best = null, dist = 7;
    for (const a of DATA.alerts) {
      if (a.step === null || a.step === undefined) continue;
      const d = Math.abs(panel.X(a.step) - px);
      if (d <= dist) { dist = d; best = a; }
    }
    return best;
  }

  function attachMouse(panel) {
    const c = panel.canvas;
    c.addEventListener("mousemove", function (ev) {
      const r = c.getBoundingClientRect();
      const px = ev.clientX - r.left;
      if (panel.sel) panel.sel[1] = px;
      hoverStep = stepAt(panel, px);
      const a = panel.X ? alertNear(panel, px) : null;
      if (a) {
        tip.textContent = "#" + a.n + "  step " + a.step + "  " + a.severity + "  " + a.detector + ": " + a.message;
        tip.style.left = (ev.pageX + 12) + "px";
        tip.style.top = (ev.pageY + 12) + "px";
        tip.style.display = "block";
      } else {
        tip.style.display = "none";
      }
      drawAll();
    });
    c.addEventListener("mouseleave", function () { hoverStep = null; tip.style.display = "none"; panel.sel = null; drawAll(); });
    c.addEventListener("mousedown", function (ev) {
      const r = c.getBoundingClientRect();
      panel.sel = [ev.clientX - r.left, ev.clientX - r.left];
    });
    c.addEventListener("mouseup", function () {
      if (panel.sel && Math.abs(panel.sel[1] - panel.sel[0]) > 5) {
        const a = stepAt(panel, Math.min(panel.sel[0], panel.sel[1]));
        const b = stepAt(panel, Math.max(panel.sel[0], panel.sel[1]));
        view = [Math.max(full[0], a), Math.min(full[1], b)];
      }
      panel.sel = null;
      drawAll();
    });
    c.addEventListener("dblclick", function () { view = full.slice(); drawAll(); });
  }

  function drawAll() {
    for (const panel of panels) draw(panel);
    window.msmonPlot = { margin: M, view: view };  // heatmap.js follows the plots' step axis and zoom
    document.dispatchEvent(new CustomEvent("msmon-view"));
  }

  for (const p of DATA.panels) panels.push(makePanel(p));
  window.addEventListener("resize", drawAll);
  if (more && more.parentElement) more.parentElement.addEventListener("toggle", drawAll);
  drawAll();
  document.body.setAttribute("data-msmon-ready", String(panels.length));
})();
