// msmon heatmaps: per-group series (the gradient norms of layer_grad_norm, the update ratios of
// layer_update_ratio), groups x steps, on the plots' step axis. Each element with data-heatmap="KEY" draws
// DATA[KEY] = {groups, baseline: {group: median}, starts, ends, cells}; cells[g][c] is
// log10(value / the group's median) of step bucket c (starts[c]..ends[c]), "nan"/"inf"/"-inf", or null.
// Follows the plots' zoom (plot.js sets window.msmonPlot and sends "msmon-view").
"use strict";
document.querySelectorAll("[data-heatmap]").forEach(function (box) {
  const key = box.getAttribute("data-heatmap");
  const H = JSON.parse(document.getElementById("msmon-data").textContent)[key];
  if (!H) return;
  const tip = document.getElementById("msmon-tip");
  const ROW = 16, TOP = 4, LEGEND = 30;
  const canvas = document.createElement("canvas");
  canvas.className = "heatmap";
  box.appendChild(canvas);
  const n = H.starts.length;
  const gaps = H.starts.slice(1).map(function (s, i) { return s - H.starts[i]; }).sort(function (a, b) { return a - b; });
  const gap = gaps.length ? gaps[gaps.length >> 1] : 1;
  let layout = null;

  function color(v) {
    if (v === null || v === undefined) return "#f3f4f6";
    if (typeof v === "string") return "#111827";
    const t = Math.max(-1, Math.min(1, v)), a = Math.abs(t);  // +-1 = 10x above / below the group's median
    const rgb = t >= 0 ? [220, 38, 38] : [37, 99, 235];
    return "rgb(" + rgb.map(function (c) { return Math.round(255 + (c - 255) * a); }).join(",") + ")";
  }

  function ratio(v) {
    if (typeof v === "string") return v === "nan" ? "NaN" : v === "inf" ? "+Inf" : "-Inf";
    const r = Math.pow(10, v);
    return "x" + (r >= 100 ? r.toFixed(0) : r >= 1 ? r.toFixed(1) : r.toPrecision(2));
  }

  function draw() {
    const plot = window.msmonPlot;
    const M = plot ? plot.margin : { left: 74, right: 18 };
    const view = plot ? plot.view : [H.starts[0], H.ends[n - 1]];
    const w = box.clientWidth;
    if (!w) return;
    const dpr = window.devicePixelRatio || 1, h = TOP + ROW * H.groups.length + LEGEND;
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const pw = w - M.left - M.right, span = Math.max(view[1] - view[0], 1e-9);
    const X = function (s) { return M.left + (s - view[0]) / span * pw; };
    const half = Math.max(0.5, (X(view[0] + gap) - X(view[0])) / 2);
    g.font = "11px system-ui, sans-serif";
    g.textAlign = "right";
    g.textBaseline = "middle";
    g.fillStyle = "#374151";
    H.groups.forEach(function (name, row) { g.fillText(name, M.left - 6, TOP + row * ROW + ROW / 2); });
    g.save();
    g.beginPath(); g.rect(M.left, TOP, pw, ROW * H.groups.length); g.clip();
    H.cells.forEach(function (cells, row) {
      for (let c = 0; c < n; c++) {
        if (H.ends[c] < view[0] - gap || H.starts[c] > view[1] + gap) continue;
        const x0 = X(H.starts[c]) - half, x1 = X(H.ends[c]) + half;
        g.fillStyle = color(cells[c]);
        g.fillRect(x0, TOP + row * ROW, Math.max(1, x1 - x0), ROW - 1);
      }
    });
    g.restore();
    g.strokeStyle = "#6b7280";
    g.strokeRect(M.left, TOP, pw, ROW * H.groups.length);
    const ly = TOP + ROW * H.groups.length + 10, lw = Math.min(240, pw / 2);
    for (let i = 0; i < lw; i++) { g.fillStyle = color(-1 + 2 * i / lw); g.fillRect(M.left + i, ly, 1, 10); }
    g.fillStyle = color("nan");
    g.fillRect(M.left + lw + 40, ly, 14, 10);
    g.fillStyle = "#374151";
    g.textAlign = "center";
    g.textBaseline = "top";
    [["x0.1", 0], ["x1 (its median)", 0.5], ["x10", 1]].forEach(function (t) { g.fillText(t[0], M.left + t[1] * lw, ly + 11); });
    g.textAlign = "left";
    g.textBaseline = "middle";
    g.fillText("NaN / Inf", M.left + lw + 58, ly + 5);
    layout = { X: X, half: half };
  }

  canvas.addEventListener("mousemove", function (ev) {
    const r = canvas.getBoundingClientRect(), px = ev.clientX - r.left, row = Math.floor((ev.clientY - r.top - TOP) / ROW);
    let found = -1;
    for (let c = 0; layout && c < n; c++) {
      if (px >= layout.X(H.starts[c]) - layout.half && px <= layout.X(H.ends[c]) + layout.half) { found = c; break; }
    }
    const v = found >= 0 && row >= 0 && row < H.groups.length ? H.cells[row][found] : undefined;
    if (v === undefined || v === null) { tip.style.display = "none"; return; }
    const group = H.groups[row], steps = H.starts[found] === H.ends[found] ? "step " + H.starts[found]
      : "steps " + H.starts[found] + "-" + H.ends[found];
    tip.textContent = group + "  " + steps + ": " + ratio(v) + " its median " + Number(H.baseline[group]).toPrecision(4);
    tip.style.left = (ev.pageX + 12) + "px";
    tip.style.top = (ev.pageY + 12) + "px";
    tip.style.display = "block";
  });
  canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  document.addEventListener("msmon-view", draw);
  window.addEventListener("resize", draw);
  draw();
  document.body.setAttribute("data-msmon-" + key.replace("_", "-"), String(H.groups.length));
});
