/* leasecheck run report: decodes the ops embedded in the page, lists the anomalies with the
 * chains of ops that prove them, and draws the timeline on a canvas.
 *
 * Plain JavaScript, no framework and no network: the page must open from a CI artifact on an
 * air-gapped machine. A history can hold a million ops, so the timeline never makes a DOM node
 * per op: it finds the ops in view by binary search in each lane (ops of a lane are sorted by
 * start and by end), paints them into one ImageData, and paints the many ops that share a pixel
 * column of a lane as one pixel in the colour of the worst of them (info and fail over ok).
 *
 * window.lcReport is the page's contract with its tests (context: "The run report's contract").
 */
(function () {
  'use strict';

  // ------------------------------------------------------------------ errors and the API
  var S = null; // the view's state, once the data is decoded
  var R = window.lcReport = {
    ready: false,
    firstPaintMs: null,
    opCount: 0,
    laneCount: 0,
    anomalyCount: 0,
    errors: [],
    view: function () { return S ? { t0: S.t0, t1: S.t1 } : { t0: 0, t1: 0 }; },
    highlighted: function () { return S ? S.hlIndices.slice() : []; },
    selectAnomaly: function (i) { if (S) guarded('selectAnomaly', selectAnomaly)(i); },
    opAt: function (index) { return S ? opInfo(positionOf(index)) : null; },
    setView: function (t0, t1) { if (S) { setView(t0, t1); drawNow(); } },
    // the kills the last frame drew as instants: [{i (in faults), kind, t (ms), x (css px), colour, victims, lanes (theirs)}]
    kills: function () { return S ? S.killsDrawn.slice() : []; },
    // the anomaly band's marks the last frame drew, one per anomaly in view:
    // [{i (in the list), slot (its row in the band), x0, x1, y (css px), ticks (css x of each proving op)}]
    anomalyMarks: function () { return S ? S.marksDrawn.slice() : []; },
    // what the canvas holds at css pixel (x, y), as [r, g, b, a]
    pixel: function (x, y) {
      var d = L_.dpr || 1;
      return Array.prototype.slice.call(L_.ctx.getImageData(Math.floor(x * d), Math.floor(y * d), 1, 1).data);
    },
    // the timeline's layout: where the fault rows and the lanes are, in css px
    layout: function () { return S ? { gutter: GUT, axis: AXIS, faultRow: FROW, top: L_.top, laneH: L_.laneH, lanes: S.L, width: L_.w } : null; },
    fit: function () { if (S) { fit(); drawNow(); } }
  };
  var seen = {};
  function report(message) {
    message = String(message);
    if (seen[message]) return;
    seen[message] = true;
    R.errors.push(message);
    var box = document.getElementById('page-errors');
    if (box) {
      box.hidden = false;
      box.textContent = 'The report hit an error (' + R.errors.length + '): ' + R.errors.join(' | ');
    }
  }
  window.addEventListener('error', function (ev) { report(ev.message || String(ev.error || 'error')); });
  window.addEventListener('unhandledrejection', function (ev) {
    report('unhandled rejection: ' + (ev.reason && ev.reason.message ? ev.reason.message : String(ev.reason)));
  });
  function guarded(name, fn) {
    return function () {
      try { return fn.apply(this, arguments); } catch (e) { report(name + ': ' + (e && e.message ? e.message : String(e))); }
    };
  }

  // ------------------------------------------------------------------ small helpers
  function $(id) { return document.getElementById(id); }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c];
    });
  }
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === 'text') e.textContent = attrs[k];
      else if (k === 'cls') e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    if (children) for (var i = 0; i < children.length; i++) {
      var c = children[i];
      if (c != null) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return e;
  }
  function fmtInt(n) { return Number(n).toLocaleString('en-US'); }
  function fmtMs(ms) {
    if (ms == null || ms < 0) return '\u2014';
    return ms.toLocaleString('en-US', { minimumFractionDigits: 3, maximumFractionDigits: 3 });
  }
  function fmtDur(ms) {
    var a = Math.abs(ms);
    if (a >= 10000) return (ms / 1000).toFixed(1) + ' s';
    if (a >= 1000) return (ms / 1000).toFixed(2) + ' s';
    if (a >= 10) return ms.toFixed(1) + ' ms';
    if (a >= 1) return ms.toFixed(2) + ' ms';
    return (ms * 1000).toFixed(a >= 0.01 ? 0 : 1) + ' \u00b5s';
  }
  // first position in [lo, hi) of a sorted array whose value is >= x
  function lowerBound(a, lo, hi, x) {
    while (lo < hi) { var m = (lo + hi) >>> 1; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }
  // first position in [lo, hi) whose value is > x
  function upperBound(a, lo, hi, x) {
    while (lo < hi) { var m = (lo + hi) >>> 1; if (a[m] <= x) lo = m + 1; else hi = m; }
    return lo;
  }

  // ------------------------------------------------------------------ decoding
  var TYPES = {
    Float64: Float64Array, Float32: Float32Array, Int32: Int32Array, Uint32: Uint32Array,
    Uint16: Uint16Array, Int8: Int8Array, Uint8: Uint8Array
  };
  function bytesOf(text) {
    if (typeof Uint8Array.fromBase64 === 'function') return Uint8Array.fromBase64(text);
    var bin = atob(text), n = bin.length, out = new Uint8Array(n);
    for (var i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function column(name) {
    var node = $('c-' + name);
    if (!node) throw new Error('the page has no column ' + name);
    var T = TYPES[node.getAttribute('data-type')];
    if (!T) throw new Error('column ' + name + ': unknown type ' + node.getAttribute('data-type'));
    var bytes = bytesOf(node.textContent);
    node.parentNode.removeChild(node); // the text is tens of megabytes at a million ops
    return new T(bytes.buffer, bytes.byteOffset, bytes.byteLength / T.BYTES_PER_ELEMENT);
  }

  // ------------------------------------------------------------------ colours
  var OK_COLOUR = '#5fb87a', INFO_COLOUR = '#bf9f7c', OPEN_COLOUR = '#e2cdb6';
  var REASON_COLOUR = {
    held: '#5b8def', terminal: '#9b6dd6', stale: '#f08c2e', expired: '#d64545',
    'not-owner': '#e05aa8', error: '#8c564b', unavailable: '#25a7b5'
  };
  var FAULT_FALLBACK = ['#d62728', '#7f7f7f', '#e377c2', '#bcbd22', '#ff9896', '#c49c94', '#aec7e8'];
  var little = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
  function rgb(hex) { var v = parseInt(hex.slice(1), 16); return [(v >> 16) & 255, (v >> 8) & 255, v & 255]; }
  function u32(c) {
    return (little ? ((255 << 24) | (c[2] << 16) | (c[1] << 8) | c[0]) : ((c[0] << 24) | (c[1] << 16) | (c[2] << 8) | 255)) >>> 0;
  }
  function shade(c, f) { return [Math.round(c[0] * f), Math.round(c[1] * f), Math.round(c[2] * f)]; }

  // ------------------------------------------------------------------ init
  function init() {
    var M = JSON.parse($('lc-meta').textContent);
    var N = M.n, L = M.laneCount, END = M.endMs;
    var C = {};
    ['index', 'process', 'start', 'end', 'lane', 'f', 'outcome', 'reason', 'node', 'epoch'].forEach(function (n) { C[n] = column(n); });
    INDEX = C.index;
    R.opCount = N;
    R.laneCount = L;

    // severity codes: 0 nothing, 1 ok, 2.. fail by reason, then info, then never completed
    var NR = M.reasons.length, SEV_INFO = 2 + NR, SEV_OPEN = 3 + NR;
    var sevCss = ['rgba(0,0,0,0)', OK_COLOUR];
    M.reasons.forEach(function (r) { sevCss.push(REASON_COLOUR[r] || '#8c564b'); });
    sevCss.push(INFO_COLOUR, OPEN_COLOUR);
    var sevName = ['', 'ok'].concat(M.reasons.map(function (r) { return 'fail: ' + r; }), ['info', 'never completed']);
    var sevU32 = new Uint32Array(sevCss.length), sevDark = new Uint32Array(sevCss.length);
    for (var q = 1; q < sevCss.length; q++) { sevU32[q] = u32(rgb(sevCss[q])); sevDark[q] = u32(shade(rgb(sevCss[q]), 0.72)); }
    var errorReason = Math.max(0, M.reasons.indexOf('error'));
    var sev = new Uint8Array(N), counts = new Float64Array(sevCss.length);
    for (var i = 0; i < N; i++) {
      var o = C.outcome[i], s;
      if (o === 0) s = 1;
      else if (o === 1) s = 2 + (C.reason[i] >= 0 ? C.reason[i] : errorReason);
      else s = C.end[i] < 0 ? SEV_OPEN : SEV_INFO;
      sev[i] = s;
      counts[s]++;
    }

    // lanes: op positions grouped by lane (each lane in start order), with each op's end in the lane
    var laneOff = new Int32Array(L + 1);
    for (i = 0; i < N; i++) laneOff[C.lane[i] + 1]++;
    for (var l = 0; l < L; l++) laneOff[l + 1] += laneOff[l];
    var cursor = laneOff.slice(0, Math.max(L, 1));
    var lanePos = new Int32Array(N), posLane = new Int32Array(N);
    for (i = 0; i < N; i++) { var at = cursor[C.lane[i]]++; lanePos[at] = i; posLane[i] = at; }
    var laneS = new Float64Array(N), laneE = new Float64Array(N), laneEmax = new Float64Array(N);
    var segJ = [], segProc = [], segOff = new Int32Array(L + 1);
    var procLane = new Map(), procEnd = new Map(); // a process's lane, and when its last op ended
    for (l = 0; l < L; l++) {
      var a = laneOff[l], b = laneOff[l + 1], most = -Infinity, last = null;
      segOff[l] = segJ.length;
      for (var j = a; j < b; j++) {
        var p = lanePos[j], st = C.start[p], en = C.end[p];
        if (en < 0) en = j + 1 < b ? C.start[lanePos[j + 1]] : END; // never completed: on until the lane's next op
        if (en < st) en = st;
        laneS[j] = st; laneE[j] = en;
        if (en > most) most = en;
        laneEmax[j] = most;
        var pr = C.process[p];
        if (pr !== last) { segJ.push(j); segProc.push(pr); last = pr; if (!procLane.has(pr)) procLane.set(pr, l); }
        procEnd.set(pr, en);
      }
    }
    segOff[L] = segJ.length;

    var dataMin = N ? C.start[0] : 0;
    M.faults.forEach(function (f) { if (f.start < dataMin) dataMin = f.start; });
    var dataMax = Math.max(END, dataMin + 1e-3);

    // anomalies: the positions of the ops each cites, and the time they span
    var A = M.anomalies;
    A.forEach(function (an) {
      var pos = [], missing = [];
      an.ops.forEach(function (idx) { var p = positionOf(idx); if (p < 0) missing.push(idx); else pos.push(p); });
      pos.sort(function (x, y) { return C.start[x] - C.start[y] || C.index[x] - C.index[y]; });
      an.pos = pos;
      an.missing = missing;
      an.tMin = Infinity; an.tMax = -Infinity;
      pos.forEach(function (p) {
        an.tMin = Math.min(an.tMin, C.start[p]);
        an.tMax = Math.max(an.tMax, laneE[posLane[p]]);
      });
    });
    R.anomalyCount = A.length;
    // each proof its own mark: anomalies whose spans overlap go to different rows of the band (ASLOTS of them;
    // past that, the row that frees up first), so many proofs at once stay as many marks
    var slotEnd = [];
    for (var s0 = 0; s0 < ASLOTS; s0++) slotEnd.push(-Infinity);
    A.map(function (an, i) { return i; })
      .filter(function (i) { return A[i].pos.length; })
      .sort(function (x, y) { return A[x].tMin - A[y].tMin || x - y; })
      .forEach(function (i) {
        var an = A[i], slot = -1, best = 0;
        for (var k = 0; k < ASLOTS; k++) {
          if (slotEnd[k] < an.tMin) { slot = k; break; }
          if (slotEnd[k] < slotEnd[best]) best = k;
        }
        if (slot < 0) slot = best;
        an.slot = slot;
        slotEnd[slot] = Math.max(slotEnd[slot], an.tMax);
      });

    var faultKinds = [];
    M.faults.forEach(function (f) { if (faultKinds.indexOf(f.kind) < 0) faultKinds.push(f.kind); });
    var faultColour = {};
    faultKinds.forEach(function (k, n) { faultColour[k] = M.faultColours[k] || FAULT_FALLBACK[n % FAULT_FALLBACK.length]; });
    var killKinds = (M.killKinds || []).filter(function (k) { return faultKinds.indexOf(k) >= 0; }), killColour = {};
    killKinds.forEach(function (k) { var c = shade(rgb(faultColour[k]), 0.55); killColour[k] = 'rgb(' + c.join(',') + ')'; });

    S = {
      M: M, C: C, N: N, L: L, END: END, sev: sev, sevCss: sevCss, sevU32: sevU32, sevDark: sevDark, sevName: sevName,
      SEV_OPEN: SEV_OPEN, counts: counts,
      laneOff: laneOff, lanePos: lanePos, posLane: posLane, laneS: laneS, laneE: laneE, laneEmax: laneEmax,
      segJ: Int32Array.from(segJ), segProc: Float64Array.from(segProc), segOff: segOff, procLane: procLane, procEnd: procEnd,
      dataMin: dataMin, dataMax: dataMax, A: A, faultKinds: faultKinds, faultColour: faultColour,
      killKinds: killKinds, killColour: killColour, killsDrawn: [], marksDrawn: [],
      t0: 0, t1: 1, keep: null, sel: -1, hlIndices: [], hlPos: [], pinned: -1, hover: null,
      rendered: {}, canvas: $('timeline'), wrap: $('canvas-wrap'), lo: new Int32Array(L), hi: new Int32Array(L)
    };
    fit();
    buildLegend();
    buildAnomalyList();
    layout();
    drawNow();
    if (!R.errors.length) {
      R.ready = true;
      R.firstPaintMs = performance.now();
    }
    wire();
  }

  // the position of the op whose invoke event has this index (the columns are in index order), or -1
  var INDEX = new Int32Array(0);
  function positionOf(index) {
    var p = lowerBound(INDEX, 0, INDEX.length, index);
    return p < INDEX.length && INDEX[p] === index ? p : -1;
  }

  function opInfo(p) {
    if (p < 0) return null;
    var C = S.C, M = S.M, r = C.reason[p], e = C.epoch[p], end = C.end[p];
    return {
      index: C.index[p], process: C.process[p], f: M.fNames[C.f[p]], node: M.nodes[C.node[p]],
      outcome: M.outcomes[C.outcome[p]], reason: r >= 0 ? M.reasons[r] : null, epoch: e >= 0 ? e : null,
      start: C.start[p], end: end >= 0 ? end : null
    };
  }

  // ------------------------------------------------------------------ view
  var MIN_SPAN = 1e-3; // one microsecond
  function maxSpan() { return (S.dataMax - S.dataMin) * 4 + 1; }
  function setView(t0, t1) {
    if (!(t1 > t0)) t1 = t0 + MIN_SPAN;
    var span = t1 - t0, mid = (t0 + t1) / 2;
    if (span < MIN_SPAN) span = MIN_SPAN;
    if (span > maxSpan()) span = maxSpan();
    S.t0 = mid - span / 2;
    S.t1 = mid + span / 2;
  }
  function fit() {
    var pad = (S.dataMax - S.dataMin) * 0.01 + MIN_SPAN;
    setView(S.dataMin - pad, S.dataMax + pad);
  }
  function zoomAt(frac, factor) {
    var t = S.t0 + (S.t1 - S.t0) * frac, span = (S.t1 - S.t0) * factor;
    span = Math.min(Math.max(span, MIN_SPAN), maxSpan());
    setView(t - span * frac, t + span * (1 - frac));
  }
  function pan(dt) {
    var span = S.t1 - S.t0, t0 = S.t0 + dt;
    t0 = Math.min(Math.max(t0, S.dataMin - span * 0.9), S.dataMax - span * 0.1);
    S.t0 = t0; S.t1 = t0 + span;
  }
  function showOps(pos, marginFrac) {
    if (!pos.length) return;
    var lo = Infinity, hi = -Infinity;
    pos.forEach(function (p) { lo = Math.min(lo, S.C.start[p]); hi = Math.max(hi, S.laneE[S.posLane[p]]); });
    var m = Math.max((hi - lo) * marginFrac, 0.02);
    setView(lo - m, hi + m);
  }

  // ------------------------------------------------------------------ layout
  // the anomaly band: ASLOTS rows of ASLOT px, so overlapping proofs are drawn apart
  var GUT = 84, AXIS = 22, FROW = 16, ASLOTS = 3, ASLOT = 6, AROW = 4 + ASLOTS * ASLOT;
  var L_ = {};
  function layout() {
    var c = S.canvas, dpr = window.devicePixelRatio || 1;
    var cssW = Math.max(320, S.wrap.clientWidth || 800);
    var laneH = S.L ? Math.max(5, Math.min(22, Math.floor(560 / S.L))) : 22;
    var top = AXIS + S.faultKinds.length * FROW + (S.A.length ? AROW : 0) + 4;
    var cssH = top + Math.max(S.L, 1) * laneH + 8;
    c.style.height = cssH + 'px';
    c.width = Math.round(cssW * dpr);
    c.height = Math.round(cssH * dpr);
    L_ = { dpr: dpr, w: cssW, h: cssH, laneH: laneH, top: top, pw: cssW - GUT };
    L_.ctx = c.getContext('2d');
    L_.off = document.createElement('canvas');
    L_.img = null;
  }
  function X(t) { return GUT + (t - S.t0) * L_.pw / (S.t1 - S.t0); }
  function T(x) { return S.t0 + (x - GUT) * (S.t1 - S.t0) / L_.pw; }

  // ------------------------------------------------------------------ drawing
  var queued = false;
  function requestDraw() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(function () { queued = false; drawNow(); });
  }
  function drawNow() { guarded('draw', draw)(); }

  function niceStep(raw) {
    var p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  }
  function tickLabel(t, step) {
    if (step >= 1000) {
      var d = Math.max(0, -Math.floor(Math.log10(step / 1000) + 1e-9));
      return (t / 1000).toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }) + ' s';
    }
    var e = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    return t.toLocaleString('en-US', { minimumFractionDigits: e, maximumFractionDigits: e }) + ' ms';
  }

  function draw() {
    var ctx = L_.ctx, dpr = L_.dpr, W = L_.w, H = L_.h, laneH = L_.laneH, top = L_.top, pw = L_.pw;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, W, H);
    var lanesH = S.L * laneH;
    for (var l = 1; l < S.L; l += 2) { ctx.fillStyle = '#f6f7f9'; ctx.fillRect(GUT, top + l * laneH, pw, laneH); }

    // time grid and axis
    var step = niceStep((S.t1 - S.t0) / Math.max(2, pw / 110));
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'center';
    for (var n = Math.ceil(S.t0 / step); n * step <= S.t1; n++) {
      var t = n * step, x = X(t);
      if (x < GUT) continue;
      ctx.fillStyle = '#e6e8ee';
      ctx.fillRect(Math.round(x), AXIS - 4, 1, H - AXIS);
      var label = tickLabel(n === 0 ? 0 : t, step), half = ctx.measureText(label).width / 2;
      if (x - half < GUT + 2 || x + half > W - 2) continue;
      ctx.fillStyle = '#4b5565';
      ctx.fillText(label, x, AXIS / 2 - 1);
    }
    ctx.fillStyle = '#d5d9e2';
    ctx.fillRect(GUT, AXIS - 1, pw, 1);

    drawFaults(ctx, top, lanesH);
    drawAnomalyTrack(ctx);
    var labels = drawOps(ctx);
    drawBarLabels(ctx, labels);
    drawKills(ctx, top, lanesH);
    drawHighlights(ctx);
    drawGutter(ctx);
  }

  function drawFaults(ctx, top, lanesH) {
    var M = S.M, laneH = L_.laneH;
    ctx.save();
    ctx.beginPath();
    ctx.rect(GUT, 0, L_.pw, L_.h);
    ctx.clip();
    M.faults.forEach(function (f) {
      var x0 = X(f.start), x1 = X(f.end == null ? S.END : f.end);
      if (x1 < GUT || x0 > L_.w) return;
      var w = Math.max(2, x1 - x0), colour = S.faultColour[f.kind], row = S.faultKinds.indexOf(f.kind);
      ctx.fillStyle = colour;
      ctx.globalAlpha = (f.victims.length ? 0.06 : 0.13) * (f.end == null ? 0.5 : 1); // never healed: on to the end, lighter
      ctx.fillRect(x0, top, w, lanesH);
      ctx.globalAlpha = 0.30;
      f.victims.forEach(function (v) { // the victim's lane, while the victim is the process in it
        var l = S.procLane.get(v);
        if (l === undefined) return;
        var vx1 = Math.min(x1, X(Math.max(S.procEnd.get(v), f.start)));
        ctx.fillRect(x0, top + l * laneH, Math.max(2, vx1 - x0), laneH);
      });
      ctx.globalAlpha = 0.9;
      var y = AXIS + row * FROW + 2;
      ctx.fillRect(x0, y, w, FROW - 4);
      ctx.globalAlpha = 1;
      if (f.end == null) { ctx.fillStyle = '#111'; ctx.fillText('\u2192', Math.min(x1, L_.w) - 6, y + (FROW - 4) / 2); }
      var label = f.kind + (f.victims.length ? ' p' + f.victims.join(',p') : '');
      if (w > 40) {
        ctx.fillStyle = '#ffffff';
        ctx.textAlign = 'left';
        ctx.font = '600 10px system-ui, sans-serif';
        var lx = Math.max(x0, GUT) + 4, room = Math.min(x1, L_.w) - lx - 4;
        if (ctx.measureText(label).width > room) label = f.kind;
        if (ctx.measureText(label).width <= room) ctx.fillText(label, lx, y + (FROW - 4) / 2 + 0.5);
      }
    });
    ctx.restore();
  }

  // A kill is an instant: its band lasts only until the replacement starts, a fraction of a pixel. So each is
  // drawn over the ops as a dark line from its fault row down through every lane, a down-pointing triangle in its
  // row, and a cross on its victim's lane.
  function drawKills(ctx, top, lanesH) {
    var drawn = S.killsDrawn = [], laneH = L_.laneH;
    if (!S.killKinds.length) return;
    ctx.save();
    ctx.beginPath();
    ctx.rect(GUT, 0, L_.pw, L_.h);
    ctx.clip();
    S.M.faults.forEach(function (f, i) {
      if (S.killKinds.indexOf(f.kind) < 0) return;
      var x = Math.round(X(f.start));
      if (x < GUT || x > L_.w) return;
      var colour = S.killColour[f.kind], y = AXIS + S.faultKinds.indexOf(f.kind) * FROW;
      ctx.fillStyle = colour;
      ctx.fillRect(x - 1, y + 2, 2, top + lanesH - y - 2);
      ctx.beginPath();
      ctx.moveTo(x - 5, y + 1);
      ctx.lineTo(x + 5, y + 1);
      ctx.lineTo(x, y + FROW - 2);
      ctx.closePath();
      ctx.fill();
      var r = Math.max(2, Math.min(4, laneH / 2 - 1)), lanes = [];
      f.victims.forEach(function (v) {
        var l = S.procLane.get(v);
        if (l === undefined) return;
        lanes.push(l);
        var cy = top + l * laneH + laneH / 2;
        [['#ffffff', 3.5], [colour, 1.6]].forEach(function (pen) {
          ctx.strokeStyle = pen[0];
          ctx.lineWidth = pen[1];
          ctx.beginPath();
          ctx.moveTo(x - r, cy - r); ctx.lineTo(x + r, cy + r);
          ctx.moveTo(x + r, cy - r); ctx.lineTo(x - r, cy + r);
          ctx.stroke();
        });
      });
      drawn.push({ i: i, kind: f.kind, t: f.start, x: x, colour: colour, victims: f.victims.slice(), lanes: lanes });
    });
    ctx.restore();
  }

  function drawAnomalyTrack(ctx) {
    var drawn = S.marksDrawn = [];
    if (!S.A.length) return;
    var top = AXIS + S.faultKinds.length * FROW + 2, h = ASLOT - 1;
    ctx.save();
    ctx.beginPath();
    ctx.rect(GUT, 0, L_.pw, L_.h);
    ctx.clip();
    // every span first, then every tick: a row holds several proofs once all its rows are taken, and a later
    // proof's span drawn over an earlier proof's tick would hide that tick
    var shown = [];
    S.A.forEach(function (a, i) {
      if (!a.pos.length) return;
      var x0 = X(a.tMin), x1 = X(a.tMax);
      if (x1 < GUT || x0 > L_.w) return;
      var y = top + a.slot * ASLOT;
      ctx.fillStyle = '#e79a9a';  // the span of the proof: from its first op's start to its last op's end
      ctx.fillRect(x0, y + Math.floor(h / 2), Math.max(1, x1 - x0), 1);
      shown.push({ i: i, slot: a.slot, x0: x0, x1: x1, y: y, ticks: [] });
    });
    ctx.fillStyle = '#c62f2f';  // a tick at each op it cites
    shown.forEach(function (m) {
      S.A[m.i].pos.forEach(function (p) {
        var x = Math.round(X(S.C.start[p]));
        if (m.ticks.length && m.ticks[m.ticks.length - 1] === x) return;
        m.ticks.push(x);
        ctx.fillRect(x - 1, m.y, 2, h);
      });
      drawn.push(m);
    });
    if (S.sel >= 0 && S.A[S.sel].pos.length) {
      var a = S.A[S.sel], s0 = X(a.tMin), s1 = Math.max(X(a.tMax), s0 + 3), y = top + a.slot * ASLOT;
      ctx.strokeStyle = '#111';
      ctx.lineWidth = 1.5;
      ctx.strokeRect(s0 - 2, y - 1, s1 - s0 + 4, h + 2);
    }
    ctx.restore();
  }

  function drawOps(ctx) {
    var dpr = L_.dpr, X0 = Math.round(GUT * dpr), Y0 = Math.round(L_.top * dpr);
    var W = S.canvas.width - X0, H = Math.max(1, Math.round(S.L * L_.laneH * dpr));
    var labels = [];
    if (W <= 0 || !S.L) return labels;
    if (!L_.img || L_.img.width !== W || L_.img.height !== H) {
      L_.img = new ImageData(W, H);
      L_.buf = new Uint32Array(L_.img.data.buffer);
      L_.agg = new Uint8Array(W + 1);
      L_.off.width = W; L_.off.height = H;
    } else L_.buf.fill(0);
    var buf = L_.buf, agg = L_.agg, C = S.C, sev = S.sev, keep = S.keep, U = S.sevU32, DK = S.sevDark, OPEN = S.SEV_OPEN;
    var laneS = S.laneS, laneE = S.laneE, laneEmax = S.laneEmax, lanePos = S.lanePos;
    var t0 = S.t0, t1 = S.t1, k = W / (t1 - t0), lh = L_.laneH * dpr, pad = Math.max(1, Math.round(lh * 0.13));
    var labelMin = 60 * dpr, wantLabels = L_.laneH >= 14;
    for (var l = 0; l < S.L; l++) {
      var yTop = Math.round(l * lh) + pad, yBot = Math.round((l + 1) * lh) - pad;
      if (yBot <= yTop) yBot = yTop + 1;
      var a = S.laneOff[l], b = S.laneOff[l + 1];
      var lo = lowerBound(laneEmax, a, b, t0), hi = upperBound(laneS, lo, b, t1);
      S.lo[l] = lo; S.hi[l] = hi;
      var aMin = W, aMax = -1;
      for (var j = lo; j < hi; j++) {
        var p = lanePos[j];
        if (keep !== null && !keep[p]) continue;
        var x0 = (laneS[j] - t0) * k, x1 = (laneE[j] - t0) * k, s = sev[p];
        if (x1 - x0 < 2) {
          var c = x0 < 0 ? 0 : x0 | 0;
          if (c >= W) continue;
          if (agg[c] < s) agg[c] = s;
          if (c < aMin) aMin = c;
          if (c > aMax) aMax = c;
          continue;
        }
        var c0 = x0 < 0 ? 0 : Math.floor(x0), c1 = x1 > W ? W : Math.floor(x1) - (x1 - x0 >= 3 ? 1 : 0);
        if (c1 <= c0) continue;
        var colour = U[s], edge = x1 - x0 >= 6 && x0 >= 0 ? DK[s] : colour;
        for (var y = yTop; y < yBot; y++) {
          var row = y * W;
          if (s === OPEN) {
            for (var xx = c0; xx < c1; xx++) buf[row + xx] = ((xx + y) & 7) < 3 ? DK[s] : colour;
          } else {
            buf.fill(colour, row + c0, row + c1);
            buf[row + c0] = edge;
          }
        }
        if (wantLabels && x1 - x0 >= labelMin && labels.length < 4000) labels.push(j);
      }
      for (var cc = aMin; cc <= aMax; cc++) {
        var sv = agg[cc];
        if (!sv) continue;
        agg[cc] = 0;
        var col = U[sv];
        for (var yy = yTop; yy < yBot; yy++) buf[yy * W + cc] = col;
      }
    }
    var octx = L_.off.getContext('2d');
    octx.putImageData(L_.img, 0, 0);
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(L_.off, X0, Y0);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return labels;
  }

  function opLabel(p) {
    var C = S.C, M = S.M, f = M.fNames[C.f[p]], e = C.epoch[p], o = C.outcome[p];
    var s = f + (e >= 0 ? ' e' + e : '');
    if (o === 1) s += ' \u2717 ' + (C.reason[p] >= 0 ? M.reasons[C.reason[p]] : 'fail');
    else if (o === 2) s += C.end[p] < 0 ? ' \u2026 open' : ' ? info';
    return s;
  }
  function drawBarLabels(ctx, labels) {
    if (!labels.length) return;
    ctx.save();
    ctx.font = '10.5px system-ui, sans-serif';
    ctx.textAlign = 'left';
    ctx.textBaseline = 'middle';
    ctx.fillStyle = '#0f172a';
    var laneH = L_.laneH;
    labels.forEach(function (j) {
      var p = S.lanePos[j], l = S.C.lane[p];
      var x0 = Math.max(X(S.laneS[j]), GUT) + 4, x1 = Math.min(X(S.laneE[j]), L_.w) - 3;
      var text = opLabel(p), room = x1 - x0;
      if (ctx.measureText(text).width > room) text = S.M.fNames[S.C.f[p]];
      if (ctx.measureText(text).width > room) return;
      ctx.fillText(text, x0, L_.top + l * laneH + laneH / 2 + 0.5);
    });
    ctx.restore();
  }

  function opRect(p) {
    var l = S.C.lane[p], x0 = X(S.C.start[p]), x1 = X(S.laneE[S.posLane[p]]);
    if (x1 - x0 < 4) { var m = (x0 + x1) / 2; x0 = m - 2; x1 = m + 2; }
    return { x: x0, y: L_.top + l * L_.laneH + 1, w: x1 - x0, h: L_.laneH - 2, l: l };
  }
  function drawHighlights(ctx) {
    ctx.save();
    ctx.beginPath();
    ctx.rect(GUT, AXIS, L_.pw, L_.h - AXIS);
    ctx.clip();
    var rects = S.hlPos.map(opRect);
    // the chain: each op to the next, from its end to the next one's start
    ctx.strokeStyle = 'rgba(17,24,39,0.75)';
    ctx.lineWidth = 1.2;
    ctx.setLineDash([4, 3]);
    for (var i = 0; i + 1 < rects.length; i++) {
      var a = rects[i], b = rects[i + 1];
      ctx.beginPath();
      ctx.moveTo(a.x + a.w, a.y + a.h / 2);
      ctx.lineTo(b.x, b.y + b.h / 2);
      ctx.stroke();
    }
    ctx.setLineDash([]);
    rects.forEach(function (r) {
      ctx.strokeStyle = '#ffcc00';
      ctx.lineWidth = 4;
      ctx.strokeRect(r.x - 1, r.y - 1, r.w + 2, r.h + 2);
      ctx.strokeStyle = '#111827';
      ctx.lineWidth = 1.5;
      ctx.strokeRect(r.x - 1, r.y - 1, r.w + 2, r.h + 2);
    });
    ctx.font = '600 10px system-ui, sans-serif';
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    rects.forEach(function (r, n) {
      var cx = Math.max(r.x, GUT + 8), cy = r.y + 1;
      ctx.fillStyle = '#111827';
      ctx.beginPath();
      ctx.arc(cx, cy, 7, 0, Math.PI * 2);
      ctx.fill();
      ctx.fillStyle = '#ffffff';
      ctx.fillText(String(n + 1), cx, cy + 0.5);
    });
    var extra = [];
    if (S.pinned >= 0) extra.push([S.pinned, '#2f5bd3']);
    if (S.hover && S.hover.type === 'op' && S.hover.p !== S.pinned) extra.push([S.hover.p, '#111827']);
    extra.forEach(function (e) {
      var r = opRect(e[0]);
      ctx.strokeStyle = e[1];
      ctx.lineWidth = 2;
      ctx.strokeRect(r.x - 1, r.y - 1, r.w + 2, r.h + 2);
    });
    ctx.restore();
  }

  function drawGutter(ctx) {
    var laneH = L_.laneH, top = L_.top;
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, GUT, L_.h);
    ctx.fillStyle = '#d5d9e2';
    ctx.fillRect(GUT - 1, 0, 1, L_.h);
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    ctx.font = '600 10px system-ui, sans-serif';
    ctx.fillStyle = '#667085';
    ctx.fillText('time', GUT - 8, AXIS / 2 - 1);
    S.faultKinds.forEach(function (k, r) {
      ctx.fillStyle = S.faultColour[k];
      ctx.fillText(k, GUT - 8, AXIS + r * FROW + FROW / 2);
    });
    if (S.A.length) { ctx.fillStyle = '#c62f2f'; ctx.fillText('anomalies', GUT - 8, AXIS + S.faultKinds.length * FROW + AROW / 2); }
    ctx.font = (laneH >= 12 ? '11px' : Math.max(7, laneH - 2) + 'px') + ' ui-monospace, monospace';
    var every = Math.max(1, Math.ceil(11 / laneH));
    for (var l = 0; l < S.L; l += every) {
      var procs = processesInView(l), label;
      if (procs.count === 0) { ctx.fillStyle = '#a0a7b4'; label = procs.last == null ? '' : 'p' + procs.last; }
      else { ctx.fillStyle = '#1d2330'; label = 'p' + procs.first + (procs.count > 1 ? ' +' + (procs.count - 1) : ''); }
      ctx.fillText(label, GUT - 8, top + l * laneH + laneH / 2 + 0.5);
    }
  }
  // the processes of lane l with an op in view: the first one, how many, or the last one before the view
  function processesInView(l) {
    var a = S.segOff[l], b = S.segOff[l + 1], lo = S.lo[l], hi = S.hi[l];
    if (a === b) return { count: 0, last: null };
    var first = upperBound(S.segJ, a, b, lo) - 1;
    if (first < a) first = a;
    if (hi <= lo) return { count: 0, last: S.segProc[first] };
    var end = lowerBound(S.segJ, first, b, hi);
    return { count: end - first, first: S.segProc[first] };
  }
  function laneProcesses(l) {
    var out = [];
    for (var s = S.segOff[l]; s < S.segOff[l + 1]; s++) out.push(S.segProc[s]);
    return out;
  }

  // ------------------------------------------------------------------ hit testing and the tooltip
  function hit(mx, my) {
    var laneH = L_.laneH, top = L_.top;
    if (my >= top && my < top + S.L * laneH) {
      var l = Math.floor((my - top) / laneH);
      if (mx < GUT) return { type: 'lane', l: l };
      var t = T(mx), tol = 3 * (S.t1 - S.t0) / L_.pw, a = S.laneOff[l], b = S.laneOff[l + 1];
      var best = -1, bestD = Infinity;
      for (var j = lowerBound(S.laneEmax, a, b, t - tol); j < b && S.laneS[j] <= t + tol; j++) {
        var p = S.lanePos[j];
        if (S.keep !== null && !S.keep[p]) continue;
        var d = t < S.laneS[j] ? S.laneS[j] - t : t > S.laneE[j] ? t - S.laneE[j] : 0;
        if (d < bestD || (d === bestD && S.sev[p] > S.sev[best])) { best = p; bestD = d; }
      }
      return best >= 0 ? { type: 'op', p: best } : null;
    }
    if (mx < GUT) return null;
    var tt = T(mx), tl = 3 * (S.t1 - S.t0) / L_.pw;
    if (my >= AXIS && my < AXIS + S.faultKinds.length * FROW) {
      var kind = S.faultKinds[Math.floor((my - AXIS) / FROW)];
      for (var i = 0; i < S.M.faults.length; i++) {
        var f = S.M.faults[i], e = f.end == null ? S.END : f.end;
        if (f.kind === kind && f.start - tl <= tt && tt <= e + tl) return { type: 'fault', i: i };
      }
      return null;
    }
    var ay = AXIS + S.faultKinds.length * FROW;
    if (S.A.length && my >= ay && my < ay + AROW) {
      var bestA = -1, bestAD = Infinity, slot = Math.max(0, Math.min(ASLOTS - 1, Math.floor((my - ay - 2) / ASLOT)));
      S.A.forEach(function (a, n) {
        if (!a.pos.length || a.slot !== slot) return;
        var d = tt < a.tMin ? a.tMin - tt : tt > a.tMax ? tt - a.tMax : 0;
        if (d <= tl * 1.5 && d < bestAD) { bestA = n; bestAD = d; }
      });
      return bestA >= 0 ? { type: 'anomaly', i: bestA } : null;
    }
    return null;
  }
  function outcomeHtml(p) {
    var C = S.C, o = C.outcome[p], s = S.sev[p];
    var sw = '<span class="swatch" style="background:' + S.sevCss[s] + '"></span>';
    if (o === 0) return sw + 'ok';
    if (o === 1) return sw + 'fail (' + esc(C.reason[p] >= 0 ? S.M.reasons[C.reason[p]] : '?') + ')';
    return sw + (C.end[p] < 0 ? 'never completed (counts as info: may take effect until the end)' : 'info (outcome unknown)');
  }
  function opHtml(p) {
    var o = opInfo(p), dur = o.end == null ? null : o.end - o.start;
    return '<b>op ' + o.index + '</b> \u00b7 ' + esc(o.f) + ' \u00b7 process ' + o.process +
      '<br><span class="t-dim">node</span> <code>' + esc(o.node) + '</code>' +
      '<br>' + outcomeHtml(p) + (o.epoch != null ? ' \u00b7 epoch ' + o.epoch : '') +
      '<br><span class="t-dim">invoke</span> ' + fmtMs(o.start) + ' ms <span class="t-dim">\u2192 complete</span> ' +
      (o.end == null ? 'never' : fmtMs(o.end) + ' ms <span class="t-dim">(' + fmtDur(dur) + ')</span>');
  }
  function tipHtml(h) {
    if (h.type === 'op') return opHtml(h.p);
    if (h.type === 'lane') {
      var procs = laneProcesses(h.l), shown = procs.slice(0, 60).join(', ');
      return '<b>lane ' + (h.l + 1) + '</b>: ' + fmtInt(procs.length) + ' process' + (procs.length === 1 ? '' : 'es') +
        ', one after another<br><span class="t-dim">processes</span> ' + esc(shown) + (procs.length > 60 ? ', \u2026' : '');
    }
    if (h.type === 'fault') {
      var f = S.M.faults[h.i], e = f.end == null ? null : f.end;
      return '<b>' + esc(f.kind) + '</b>' + (f.members ? ' \u00b7 members: ' + esc(f.members) :
        f.victims.length ? ' \u00b7 victims: process ' + esc(f.victims.join(', ')) : ' \u00b7 the store') +
        '<br>' + fmtMs(f.start) + ' ms \u2192 ' + (e == null ? 'never healed' : fmtMs(e) + ' ms (' + fmtDur(e - f.start) + ')') +
        '<br><span class="t-dim">click to zoom to it</span>';
    }
    var a = S.A[h.i];
    return '<b>' + esc(a.kind) + '</b> on <code>' + esc(a.node) + '</code><br><span class="t-dim">ops</span> ' + esc(a.ops.join(', ')) +
      '<br><span class="t-dim">click to select it</span>';
  }
  function showTip(h, mx, my) {
    var tip = $('tip');
    if (!h) { tip.hidden = true; return; }
    tip.innerHTML = tipHtml(h);
    tip.hidden = false;
    var w = tip.offsetWidth, hh = tip.offsetHeight, x = mx + 14, y = my + 14;
    if (x + w > L_.w - 4) x = Math.max(4, mx - w - 14);
    if (y + hh > L_.h - 4) y = Math.max(4, my - hh - 10);
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }

  // ------------------------------------------------------------------ anomalies and the chain
  var FIRST_PAGE = 60, PAGE = 200, ALL_BELOW = 400;
  function buildAnomalyList() {
    var box = $('anomalies'), A = S.A, M = S.M;
    box.textContent = '';
    var totals = 0;
    for (var k in M.anomalyTotals) totals += M.anomalyTotals[k];
    $('anomaly-count').textContent = A.length ? '(' + fmtInt(A.length) + (totals > A.length ? ' listed of ' + fmtInt(totals) + ' found' : '') + ')' : '';
    if (!A.length) {
      var unknown = M.valid === 'unknown';
      box.appendChild(el('div', { cls: 'none' + (unknown ? ' unknown' : ''), text: M.valid === true
        ? 'No anomalies: every op of the history is consistent with the lease model.'
        : unknown ? 'No anomaly proven, but the verdict is unknown: see the reason above.'
          : 'The verdict is INVALID but lists no anomaly (see the reason above).' }));
      return;
    }
    var groups = [], byKind = {};
    A.forEach(function (a, i) {
      if (!byKind[a.kind]) { byKind[a.kind] = { kind: a.kind, items: [], shown: 0 }; groups.push(byKind[a.kind]); }
      byKind[a.kind].items.push(i);
    });
    S.groups = byKind;
    groups.forEach(function (g) {
      var total = M.anomalyTotals[g.kind] || g.items.length;
      var head = el('div', { cls: 'group-head' }, [
        el('h3', null, [el('span', { cls: 'kind-tag', text: g.kind }), ' ', el('span', { cls: 'count', text: '\u00d7 ' + fmtInt(g.items.length) +
          (total > g.items.length ? ' listed (' + fmtInt(total) + ' found; at most 100 per node are listed)' : '') })]),
        el('span', { cls: 'meaning', text: M.kindMeaning[g.kind] || '' })
      ]);
      g.body = el('div');
      g.more = el('button', { type: 'button', cls: 'more' });
      g.more.addEventListener('click', function () { renderMore(g, PAGE); });
      box.appendChild(el('div', { cls: 'group', 'data-kind': g.kind }, [head, g.body, g.more]));
      renderMore(g, A.length <= ALL_BELOW ? g.items.length : FIRST_PAGE);
    });
    box.addEventListener('click', function (ev) {
      var item = ev.target.closest ? ev.target.closest('.anomaly') : null;
      if (item) selectAnomaly(Number(item.getAttribute('data-index')));
    });
    box.addEventListener('keydown', function (ev) {
      var item = ev.target.closest ? ev.target.closest('.anomaly') : null;
      if (item && (ev.key === 'Enter' || ev.key === ' ')) { ev.preventDefault(); selectAnomaly(Number(item.getAttribute('data-index'))); }
    });
  }
  function renderMore(g, count) {
    var end = Math.min(g.items.length, g.shown + count), frag = document.createDocumentFragment();
    for (var n = g.shown; n < end; n++) {
      var i = g.items[n], a = S.A[i];
      var item = el('div', {
        cls: 'anomaly' + (i === S.sel ? ' selected' : ''), 'data-kind': a.kind, 'data-node': a.node, 'data-ops': a.ops.join(','),
        'data-index': String(i), tabindex: '0', role: 'button'
      }, [
        el('div', { cls: 'a-head' }, [el('span', { cls: 'a-node', text: a.node }), el('span', { cls: 'a-ops', text: 'ops ' + a.ops.join(', ') })]),
        el('div', { cls: 'a-expl', text: a.explanation })
      ].concat(a.attribution ? [el('div', { cls: 'a-fault', text: a.attribution })] : []));
      S.rendered[i] = item;
      frag.appendChild(item);
    }
    g.body.appendChild(frag);
    g.shown = end;
    var left = g.items.length - end;
    g.more.hidden = left <= 0;
    g.more.textContent = 'show ' + fmtInt(Math.min(PAGE, left)) + ' more (' + fmtInt(left) + ' not shown)';
  }

  function selectAnomaly(i) {
    i = Number(i);
    var a = S.A[i];
    if (!a) throw new Error('no anomaly ' + i + ' (the report lists ' + S.A.length + ')');
    if (S.sel >= 0 && S.rendered[S.sel]) S.rendered[S.sel].classList.remove('selected');
    S.sel = i;
    S.hlPos = a.pos.slice();
    S.hlIndices = a.pos.map(function (p) { return S.C.index[p]; }).sort(function (x, y) { return x - y; });
    showOps(a.pos, 0.12);
    var g = S.groups && S.groups[a.kind];
    if (g && !S.rendered[i]) renderMore(g, g.items.indexOf(i) - g.shown + 1);
    var item = S.rendered[i];
    if (item) {
      item.classList.add('selected');
      var list = $('anomalies'), ir = item.getBoundingClientRect(), lr = list.getBoundingClientRect();
      if (ir.top < lr.top || ir.bottom > lr.bottom) list.scrollTop += ir.top - lr.top - 40;
    }
    renderChain(a);
    drawNow();
    var cr = S.canvas.getBoundingClientRect();
    if (cr.bottom > window.innerHeight + Math.min(cr.height, 200) * 0.5 || cr.top < 0) S.wrap.scrollIntoView({ block: 'nearest' });
  }
  function clearSelection() {
    if (S.sel >= 0 && S.rendered[S.sel]) S.rendered[S.sel].classList.remove('selected');
    S.sel = -1; S.hlPos = []; S.hlIndices = [];
    var chain = $('chain');
    chain.textContent = '';
    chain.appendChild(el('p', { cls: 'muted', text: 'Click an anomaly: the timeline zooms to the ops it cites, and the chain of ops that proves it shows here.' }));
    requestDraw();
  }

  function renderChain(a) {
    var chain = $('chain'), C = S.C, M = S.M;
    chain.textContent = '';
    chain.appendChild(el('h3', null, [el('span', { cls: 'kind-tag', text: a.kind }), ' on ', el('span', { cls: 'a-node', text: a.node })]));
    chain.appendChild(el('p', { cls: 'expl', text: a.explanation }));
    if (a.attribution) chain.appendChild(el('p', { cls: 'expl fault', text: a.attribution }));
    var nodes = {};
    a.pos.forEach(function (p) { nodes[C.node[p]] = 1; });
    var manyNodes = Object.keys(nodes).length > 1;
    var head = ['#', 'op', 'process', 'f'].concat(manyNodes ? ['node'] : [], ['epoch', 'outcome', 'invoke \u2192 complete (ms)']);
    var tbody = el('tbody');
    a.pos.forEach(function (p, n) {
      var o = opInfo(p);
      if (n > 0) {
        var q = a.pos[n - 1], qe = C.end[q], before = qe >= 0 && qe < o.start;
        var text = before
          ? 'op ' + C.index[q] + ' completed before op ' + o.index + ' was invoked (' + fmtDur(o.start - qe) + ' earlier)'
          : 'op ' + C.index[q] + ' and op ' + o.index + ' are concurrent' + (qe < 0 ? ' (op ' + C.index[q] + ' never completed)' : '');
        tbody.appendChild(el('tr', { cls: 'rel ' + (before ? 'before' : 'concurrent') }, [el('td', { colspan: String(head.length), text: text })]));
      }
      var outcome = el('span', { cls: 'oc' });
      outcome.innerHTML = outcomeHtml(p);
      var cells = [el('td', { cls: 'num' }, [el('b', { text: String(n + 1) })]), el('td', { cls: 'mono', text: String(o.index) }),
        el('td', { text: String(o.process) }), el('td', { text: o.f })];
      if (manyNodes) cells.push(el('td', { cls: 'mono', text: o.node }));
      cells.push(el('td', { text: o.epoch == null ? '\u2014' : String(o.epoch) }), el('td', null, [outcome]),
        el('td', { cls: 'mono', text: fmtMs(o.start) + ' \u2192 ' + (o.end == null ? 'never' : fmtMs(o.end)) }));
      var row = el('tr', { cls: 'op', title: 'zoom to op ' + o.index }, cells);
      row.addEventListener('click', function () { showOps([p], 1.5); drawNow(); });
      tbody.appendChild(row);
    });
    chain.appendChild(el('table', null, [el('thead', null, [el('tr', null, head.map(function (h) { return el('th', { text: h }); }))]), tbody]));
    if (a.missing.length) chain.appendChild(el('p', { cls: 'muted small', text: 'not client ops of this history: ' + a.missing.join(', ') }));
    var only = el('button', { type: 'button', text: 'show only this node' });
    only.addEventListener('click', function () { $('filter-node').value = a.node; applyFilters(); });
    var zoom = el('button', { type: 'button', text: 'zoom to these ops' });
    zoom.addEventListener('click', function () { showOps(a.pos, 0.12); drawNow(); });
    chain.appendChild(el('div', { cls: 'actions' }, [zoom, only]));
  }

  // ------------------------------------------------------------------ filters
  function parseProcesses(text) {
    var ranges = [], parts = text.split(/[\s,]+/).filter(Boolean);
    for (var i = 0; i < parts.length; i++) {
      var m = /^p?(\d+)(?:-p?(\d+))?$/.exec(parts[i]);
      if (!m) return null;
      var lo = Number(m[1]), hi = m[2] === undefined ? lo : Number(m[2]);
      ranges.push([Math.min(lo, hi), Math.max(lo, hi)]);
    }
    return ranges;
  }
  function applyFilters() {
    var nodeText = $('filter-node').value.trim(), procText = $('filter-process').value.trim(), M = S.M, C = S.C;
    var nodeMask = null, nodeCount = 0, ranges = null;
    if (nodeText) {
      nodeMask = new Uint8Array(M.nodes.length);
      var exact = M.nodes.indexOf(nodeText);
      if (exact >= 0) { nodeMask[exact] = 1; nodeCount = 1; } else {
        var needle = nodeText.toLowerCase();
        for (var n = 0; n < M.nodes.length; n++) if (M.nodes[n].toLowerCase().indexOf(needle) >= 0) { nodeMask[n] = 1; nodeCount++; }
      }
    }
    var procInput = $('filter-process');
    if (procText) {
      ranges = parseProcesses(procText);
      procInput.classList.toggle('bad', ranges === null);
    } else procInput.classList.remove('bad');
    if (!nodeMask && !ranges) {
      S.keep = null;
      $('filter-status').textContent = '';
    } else {
      var keep = S.keep && S.keep.length === S.N ? S.keep : new Uint8Array(S.N), kept = 0;
      for (var i = 0; i < S.N; i++) {
        var ok = nodeMask === null || nodeMask[C.node[i]] === 1;
        if (ok && ranges) {
          var pr = C.process[i];
          ok = false;
          for (var r = 0; r < ranges.length; r++) if (pr >= ranges[r][0] && pr <= ranges[r][1]) { ok = true; break; }
        }
        keep[i] = ok ? 1 : 0;
        kept += ok ? 1 : 0;
      }
      S.keep = keep;
      $('filter-status').textContent = 'showing ' + fmtInt(kept) + ' of ' + fmtInt(S.N) + ' ops' +
        (nodeMask ? ' \u00b7 ' + fmtInt(nodeCount) + ' node' + (nodeCount === 1 ? '' : 's') + ' match' : '') +
        (procText && ranges === null ? ' \u00b7 process filter not understood (numbers and ranges: 3, 7-9)' : '');
    }
    if (S.hover && S.hover.type === 'op' && S.keep && !S.keep[S.hover.p]) { S.hover = null; showTip(null); }
    if (S.keep && !keptInView()) showKept(); // the matches are elsewhere: go to them
    drawNow();
  }

  function keptInView() {
    for (var l = 0; l < S.L; l++) {
      var a = S.laneOff[l], b = S.laneOff[l + 1];
      for (var j = lowerBound(S.laneEmax, a, b, S.t0); j < b && S.laneS[j] <= S.t1; j++) if (S.keep[S.lanePos[j]]) return true;
    }
    return false;
  }
  function showKept() {
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < S.N; i++) {
      if (!S.keep[i]) continue;
      if (S.C.start[i] < lo) lo = S.C.start[i];
      var e = S.laneE[S.posLane[i]];
      if (e > hi) hi = e;
    }
    if (hi >= lo) { var m = Math.max((hi - lo) * 0.05, 0.05); setView(lo - m, hi + m); }
  }

  // ------------------------------------------------------------------ the legend and the pinned op
  function buildLegend() {
    var box = $('legend'), items = [el('span', { cls: 'lg-title', text: 'outcome' })];
    for (var s = 1; s < S.sevCss.length; s++) {
      if (!S.counts[s] && s !== 1) continue;
      items.push(el('span', null, [el('span', { cls: 'swatch', style: 'background:' + S.sevCss[s] }), S.sevName[s] + ' ' + fmtInt(S.counts[s])]));
    }
    if (S.faultKinds.length) {
      items.push(el('span', { cls: 'sep', text: '|' }), el('span', { cls: 'lg-title', text: 'faults' }));
      S.faultKinds.forEach(function (k) {
        var n = S.M.faults.filter(function (f) { return f.kind === k; }).length;
        var kill = S.killKinds.indexOf(k) >= 0, swatch = kill ? 'swatch kill' : 'swatch';
        items.push(el('span', null, [el('span', { cls: swatch, style: 'background:' + (kill ? S.killColour[k] : S.faultColour[k]) }), k + ' \u00d7' + n]));
      });
      items.push(el('span', { cls: 'muted', text: S.killKinds.length ? '(victims\u2019 lanes tinted; a kill: a line, \u2715 on its victim)' : '(victims\u2019 lanes tinted)' }));
    }
    items.push(el('span', { cls: 'sep', text: '|' }), el('span', null, [el('span', { cls: 'swatch', style: 'background:#ffcc00;outline:1.5px solid #111827' }), 'ops of the selected anomaly']));
    items.forEach(function (i) { box.appendChild(i); });
  }
  function pin(p) {
    S.pinned = p;
    var box = $('pinned');
    box.textContent = '';
    if (p < 0) { requestDraw(); return; }
    var o = opInfo(p), info = el('span');
    info.innerHTML = opHtml(p).replace(/<br>/g, ' \u00b7 ');
    var byNode = el('button', { type: 'button', text: 'only this node' });
    byNode.addEventListener('click', function () { $('filter-node').value = o.node; applyFilters(); });
    var byProc = el('button', { type: 'button', text: 'only this process' });
    byProc.addEventListener('click', function () { $('filter-process').value = String(o.process); applyFilters(); });
    var unpin = el('button', { type: 'button', text: 'unpin' });
    unpin.addEventListener('click', function () { pin(-1); });
    [el('b', { text: 'pinned ' }), info, byNode, byProc, unpin].forEach(function (c) { box.appendChild(c); });
    requestDraw();
  }

  // ------------------------------------------------------------------ input
  function wire() {
    var c = S.canvas, drag = null;
    function local(ev) { var r = c.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; }
    c.addEventListener('pointerdown', guarded('pointerdown', function (ev) {
      if (ev.button !== 0) return;
      var m = local(ev);
      drag = { x: m[0], y: m[1], t0: S.t0, moved: false, id: ev.pointerId };
      c.setPointerCapture(ev.pointerId);
    }));
    c.addEventListener('pointermove', guarded('pointermove', function (ev) {
      var m = local(ev);
      if (drag) {
        var dx = m[0] - drag.x;
        if (Math.abs(dx) > 3 || Math.abs(m[1] - drag.y) > 3) drag.moved = true;
        if (drag.moved) {
          c.classList.add('dragging');
          S.t0 = drag.t0; S.t1 = drag.t0 + (S.t1 - S.t0);
          pan(-dx * (S.t1 - S.t0) / L_.pw);
          showTip(null);
          requestDraw();
        }
        return;
      }
      var h = hit(m[0], m[1]), before = S.hover;
      S.hover = h;
      showTip(h, m[0], m[1]);
      if ((before && before.type === 'op') || (h && h.type === 'op')) requestDraw();
    }));
    function up(ev) {
      if (!drag) return;
      var was = drag;
      drag = null;
      c.classList.remove('dragging');
      if (was.moved) return;
      var m = local(ev), h = hit(m[0], m[1]);
      if (!h) return;
      if (h.type === 'op') pin(h.p);
      else if (h.type === 'anomaly') selectAnomaly(h.i);
      else if (h.type === 'fault') {
        var f = S.M.faults[h.i], e = f.end == null ? S.END : f.end, m2 = Math.max((e - f.start) * 0.15, 0.05);
        setView(f.start - m2, e + m2);
        drawNow();
      }
    }
    c.addEventListener('pointerup', guarded('pointerup', up));
    c.addEventListener('pointercancel', function () { drag = null; c.classList.remove('dragging'); });
    c.addEventListener('pointerleave', function () {
      if (drag) return;
      if (S.hover) { S.hover = null; showTip(null); requestDraw(); }
    });
    c.addEventListener('wheel', guarded('wheel', function (ev) {
      ev.preventDefault();
      var m = local(ev), unit = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? 400 : 1;
      var dx = ev.deltaX * unit, dy = ev.deltaY * unit;
      if (ev.shiftKey && !dx) { dx = dy; dy = 0; }
      if (Math.abs(dx) > Math.abs(dy)) pan(dx * (S.t1 - S.t0) / L_.pw);
      else zoomAt(Math.min(1, Math.max(0, (m[0] - GUT) / L_.pw)), Math.exp(dy * 0.0018));
      showTip(null);
      requestDraw();
    }), { passive: false });
    c.addEventListener('keydown', guarded('keydown', function (ev) {
      var span = S.t1 - S.t0, handled = true;
      if (ev.key === 'ArrowLeft') pan(-span * 0.15);
      else if (ev.key === 'ArrowRight') pan(span * 0.15);
      else if (ev.key === '+' || ev.key === '=' || ev.key === 'ArrowUp') zoomAt(0.5, 0.7);
      else if (ev.key === '-' || ev.key === '_' || ev.key === 'ArrowDown') zoomAt(0.5, 1 / 0.7);
      else if (ev.key === '0' || ev.key === 'f') fit();
      else if (ev.key === 'Escape') { clearSelection(); pin(-1); }
      else handled = false;
      if (handled) { ev.preventDefault(); requestDraw(); }
    }));
    $('zoom-in').addEventListener('click', guarded('zoom', function () { zoomAt(0.5, 0.6); drawNow(); }));
    $('zoom-out').addEventListener('click', guarded('zoom', function () { zoomAt(0.5, 1 / 0.6); drawNow(); }));
    $('zoom-fit').addEventListener('click', guarded('fit', function () { fit(); drawNow(); }));
    $('clear-selection').addEventListener('click', guarded('clear', function () { clearSelection(); pin(-1); }));
    var timer = null;
    function later() { clearTimeout(timer); timer = setTimeout(guarded('filter', applyFilters), 120); }
    $('filter-node').addEventListener('input', later);
    $('filter-process').addEventListener('input', later);
    var resizeTimer = null;
    window.addEventListener('resize', function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(guarded('resize', function () { layout(); drawNow(); }), 80);
    });
    var copy = $('copy-replay');
    if (copy) copy.addEventListener('click', function () {
      var text = $('replay').textContent;
      function done() { copy.textContent = 'copied'; setTimeout(function () { copy.textContent = 'copy'; }, 1500); }
      function fallback() {
        var range = document.createRange();
        range.selectNodeContents($('replay'));
        var sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        try { document.execCommand('copy'); done(); } catch (e) { /* the text stays selected for the reader to copy */ }
      }
      if (navigator.clipboard && navigator.clipboard.writeText) navigator.clipboard.writeText(text).then(done, fallback);
      else fallback();
    });
    if (!$('replay').textContent && copy) copy.hidden = true;
  }

  // ------------------------------------------------------------------ go
  try {
    var started = performance.now();
    init();
    R.loadMs = performance.now() - started;
  } catch (e) {
    report('loading the report: ' + (e && e.message ? e.message : String(e)));
  }
})();
