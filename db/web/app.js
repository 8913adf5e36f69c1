/* app.js: the pages of `terarec runs serve` (list, run, compare). Reads /api/...,
 * writes the DOM with textContent only (never innerHTML with data), draws curves
 * with dygraphs (served from the system's libjs-dygraphs), and polls while a run
 * is running. No framework, no build step. (The Makefile refuses two question
 * marks in a row here: C11 reads them as a trigraph.) */
'use strict';
(function () {
  var POLL_MS = 3000;
  var body = document.body;

  function $(id) { return document.getElementById(id); }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function link(href, text) { var a = el('a', text); a.href = href; return a; }
  function msg(text) { var m = $('msg'); if (m) { m.textContent = text; m.className = text ? 'error' : ''; } }
  function live(on) { var l = $('live'); if (l) l.textContent = on ? 'live: updating every ' + POLL_MS / 1000 + ' s' : ''; }
  function fmtTime(t) {
    if (t === null || t === undefined) return '-';
    var d = new Date(t * 1000), p = function (n) { return (n < 10 ? '0' : '') + n; };
    return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' + p(d.getHours()) + ':' +
      p(d.getMinutes()) + ':' + p(d.getSeconds());
  }
  function fmtDur(s) {
    if (s === null || s === undefined || !isFinite(s) || s < 0) return '-';
    s = Math.round(s);
    if (s >= 3600) return Math.floor(s / 3600) + 'h' + ('0' + Math.floor(s / 60) % 60).slice(-2) + 'm';
    if (s >= 60) return Math.floor(s / 60) + 'm' + ('0' + s % 60).slice(-2) + 's';
    return s + 's';
  }
  function fmtNum(v, digits) {
    if (v === null || v === undefined) return '-';
    if (typeof v !== 'number') return String(v);
    if (Number.isInteger(v) || Math.abs(v) >= 1000) return String(Math.round(v));
    return v.toPrecision(digits || 6);
  }
  function fmtBytes(b) {
    if (b === null || b === undefined) return '-';
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : String(b)) + ' ' + u[i];
  }
  function getJSON(url) {
    return fetch(url, { credentials: 'same-origin', cache: 'no-store' }).then(function (r) {
      if (!r.ok) return r.text().then(function (t) { throw new Error(url + ': ' + r.status + ' ' + t.trim()); });
      return r.json();
    });
  }
  function runHref(id) { return '/run/' + encodeURIComponent(id); }
  function chartsOk() { return typeof Dygraph !== 'undefined'; }
  var NO_CHARTS = 'no charts: /static/dygraph.min.js is missing (install the Debian package libjs-dygraphs)';

  /* A table from a header and rows of cells (a cell: text, or a DOM node). */
  function fillTable(t, head, rows) {
    while (t.firstChild) t.removeChild(t.firstChild);
    var thead = el('thead'), tr = el('tr');
    head.forEach(function (h) { tr.appendChild(el('th', h)); });
    thead.appendChild(tr);
    t.appendChild(thead);
    var tb = el('tbody');
    rows.forEach(function (r) {
      var row = el('tr');
      r.forEach(function (c) {
        var td = el('td');
        if (c instanceof Node) td.appendChild(c); else td.textContent = c === null || c === undefined ? '-' : String(c);
        row.appendChild(td);
      });
      tb.appendChild(row);
    });
    if (!rows.length) { var e = el('tr'), td = el('td', '(none)'); td.colSpan = head.length; e.appendChild(td); tb.appendChild(e); }
    t.appendChild(tb);
  }
  function fillKV(t, pairs) {
    while (t.firstChild) t.removeChild(t.firstChild);
    pairs.forEach(function (p) {
      var tr = el('tr'), td = el('td');
      tr.appendChild(el('th', p[0]));
      if (p[1] instanceof Node) td.appendChild(p[1]); else td.textContent = p[1] === null || p[1] === undefined ? '-' : String(p[1]);
      tr.appendChild(td);
      t.appendChild(tr);
    });
  }

  /* Exponential moving average with TensorBoard's debiasing: w in [0, 1), 0 is none;
   * nulls stay nulls and do not move the average. */
  function ema(values, w) {
    if (!(w > 0)) return values.slice();
    var last = 0, n = 0;
    return values.map(function (v) {
      if (v === null || v === undefined || !isFinite(v)) return null;
      last = last * w + (1 - w) * v;
      n++;
      return last / (1 - Math.pow(w, n));
    });
  }

  /* The vertical markers of a chart (x in the chart's units: a step, or ms for
   * wall time), as thin elements over the plot area whose title shows on hover. */
  function placeMarkers(g, div, marks) {
    var layer = div.querySelector('.markers');
    if (!layer) { layer = el('div', null, 'markers'); div.appendChild(layer); }
    while (layer.firstChild) layer.removeChild(layer.firstChild);
    var area = g.getArea(), xr = g.xAxisRange(), n = 0;
    (marks || []).forEach(function (m) {
      if (m.x === null || m.x === undefined || !isFinite(m.x) || m.x < xr[0] || m.x > xr[1]) return;
      var d = el('div', null, 'marker marker-' + m.kind);
      d.title = m.title;
      d.style.left = (g.toDomXCoord(m.x) - 3) + 'px';
      d.style.top = area.y + 'px';
      d.style.height = area.h + 'px';
      layer.appendChild(d);
      n++;
    });
    div.setAttribute('data-markers', String(n));
  }

  /* A lone point's value written beside it (a one-row chart is a dot, not an empty axis). */
  function labelLonePoint(ctx, area, g) {
    if (g.numRows() !== 1) return;
    ctx.save();
    ctx.fillStyle = '#1d2430';
    ctx.font = '13px system-ui, sans-serif';
    for (var c = 1; c < g.numColumns(); c++) {
      var v = g.getValue(0, c);
      if (v === null || !isFinite(v)) continue;
      ctx.fillText(fmtNum(v), g.toDomXCoord(g.getValue(0, 0)) + 8, g.toDomYCoord(v) - 8);
    }
    ctx.restore();
  }

  /* Draws (or redraws) a chart into div; rows: [[x, y...]...]. The legend goes in a
   * line above the plot (never over the data). extra: {marks, logscale, series}.
   * Sets data-points to the rows dygraphs holds once it has drawn them. */
  var graphs = {};
  function draw(div, rows, labels, xlabel, legend, extra) {
    extra = extra || {};
    if (!chartsOk()) { div.textContent = NO_CHARTS; div.className += ' empty'; return; }
    var ld = $(div.id + '-legend');
    if (!ld) { ld = el('div', null, 'legend'); ld.id = div.id + '-legend'; div.parentNode.insertBefore(ld, div); }
    if (!rows.length) {
      if (graphs[div.id]) { graphs[div.id].destroy(); delete graphs[div.id]; }
      div.textContent = '(no values)';
      ld.textContent = '';
      div.setAttribute('data-points', '0');
      return;
    }
    var lone = rows.length === 1, opts = {
      xlabel: xlabel, connectSeparatedPoints: true, legend: legend || 'always', labelsDiv: ld,
      labelsSeparateLines: false, drawPoints: rows.length < 60, pointSize: rows.length < 4 ? 5 : 2, strokeWidth: 1.5,
      animatedZooms: false, axes: { y: { axisLabelWidth: 64 } }, logscale: !!extra.logscale, xRangePad: 10,
      series: extra.series || {}, valueRange: null, dateWindow: null,
      underlayCallback: labelLonePoint,
      drawCallback: function (g) {
        div.setAttribute('data-points', String(g.numRows()));
        div.setAttribute('data-single', g.numRows() === 1 ? '1' : '0');
        div.setAttribute('data-logscale', extra.logscale ? '1' : '0');
        placeMarkers(g, div, extra.marks);
      }
    };
    if (lone) { /* room around the dot, so that it sits in the middle with its value */
      var x = rows[0][0], ys = rows[0].slice(1).filter(function (v) { return v !== null && isFinite(v); });
      var xv = x instanceof Date ? x.getTime() : x, dx = x instanceof Date ? 60000 : Math.max(1, Math.abs(xv) * 0.1);
      opts.dateWindow = [xv - dx, xv + dx];
      if (ys.length) {
        var y = ys[0], dy = Math.abs(y) * 0.5 || 1;
        opts.valueRange = extra.logscale && y > 0 ? [y / 2, y * 2] : [y - dy, y + dy];
      }
    }
    var g = graphs[div.id];
    if (g && g.getLabels().join('\u0001') === labels.join('\u0001') && g.getOption('xlabel') === xlabel) {
      opts.file = rows;
      g.updateOptions(opts);
    } else {
      if (g) g.destroy();
      div.textContent = '';
      opts.labels = labels;
      graphs[div.id] = new Dygraph(div, rows, opts);
    }
  }

  /* ---- the list ------------------------------------------------------------------------ */
  /* The usual columns: [header, the run's key, the sort key]. */
  var LIST_COLS = [['id', 'id', 'id'], ['name', 'name', 'name'], ['status', 'status', 'status'], ['tags', 'tags', 'tags'],
    ['start', 'start_time', 'start_time'], ['duration', 'duration_s', 'duration_s'], ['steps', 'steps', 'steps'],
    ['samples/s', 'samples_per_s', 'samples_per_s'], ['best AUC', 'best_auc', 'best_auc'],
    ['SLURM job', 'slurm_job_id', 'slurm_job_id'], ['nodes, workers', 'size', 'workers'], ['note', 'note', 'note']];
  function nodesWorkers(n, w) {
    function one(k, word) { return k === null || k === undefined ? '? ' + word + 's' : k + ' ' + word + (k === 1 ? '' : 's'); }
    return one(n, 'node') + ', ' + one(w, 'worker');
  }
  /* A parameter's or metric's value as a cell: numbers without float noise. */
  function fmtValue(v) {
    if (v === null || v === undefined) return '-';
    if (typeof v === 'number') { var t = String(v); return t.length > 10 && !Number.isInteger(v) ? String(+v.toPrecision(6)) : t; }
    if (typeof v === 'object') return JSON.stringify(v);
    return String(v);
  }
  /* The filter box's expressions: split at spaces outside quotes. */
  function splitFilters(text) {
    var out = [], cur = '', q = null;
    for (var i = 0; i < text.length; i++) {
      var ch = text[i];
      if (q) { cur += ch; if (ch === q) q = null; }
      else if (ch === '"' || ch === "'") { cur += ch; q = ch; }
      else if (/\s/.test(ch)) { if (cur) out.push(cur); cur = ''; }
      else cur += ch;
    }
    if (cur) out.push(cur);
    return out;
  }
  function tagSpans(tags, onClick) {
    var span = el('span', null, 'tags');
    (Array.isArray(tags) ? tags : []).forEach(function (t) {
      var s = el('span', t, 'tag');
      if (onClick) { s.title = 'only the runs tagged ' + t; s.addEventListener('click', function () { onClick(t); }); }
      span.appendChild(s);
    });
    return span;
  }
  function listPage() {
    var status = $('status'), name = $('name'), fbox = $('filter-expr'), cbox = $('columns'), timer = null;
    var q = new URLSearchParams(location.search), sort = q.get('sort') || '';
    status.value = q.get('status') || '';
    name.value = q.get('name') || '';
    fbox.value = q.getAll('filter').join(' ');
    cbox.value = q.get('columns') || '';
    function params() {
      var p = new URLSearchParams();
      if (status.value) p.set('status', status.value);
      if (name.value) p.set('name', name.value);
      splitFilters(fbox.value).forEach(function (f) { p.append('filter', f); });
      if (cbox.value.trim()) p.set('columns', cbox.value.trim());
      if (sort) p.set('sort', sort);
      return p;
    }
    function header(cols) {
      var tr = $('runs').tHead.rows[0];
      while (tr.firstChild) tr.removeChild(tr.firstChild);
      tr.appendChild(el('th'));
      cols.forEach(function (c) {
        var th = el('th', c[0], 'sortable'), key = c[2];
        if (sort === key || sort === '-' + key) th.textContent += sort[0] === '-' ? ' \u25bc' : ' \u25b2';
        th.setAttribute('data-sort', key);
        th.title = 'sort by ' + key;
        th.addEventListener('click', function () { sort = sort === key ? '-' + key : key; load(); });
        tr.appendChild(th);
      });
    }
    function addTag(t) { fbox.value = (fbox.value ? fbox.value + ' ' : '') + 'tag=' + t; load(); }
    function load() {
      if (timer) { clearTimeout(timer); timer = null; }
      var shown = params(), p = params();
      p.set('limit', '0');
      history.replaceState(null, '', location.pathname + (shown.toString() ? '?' + shown : ''));
      getJSON('/api/runs?' + p).then(function (runs) {
        msg('');
        var chosen = cbox.value.trim() ? cbox.value.split(',').map(function (c) { return c.trim(); }).filter(Boolean) : null;
        var cols = chosen ? (chosen.indexOf('id') < 0 ? ['id'] : []).concat(chosen).map(function (c) { return [c, c, c]; }) : LIST_COLS;
        header(cols);
        var tb = $('runs').tBodies[0], anyRunning = false;
        var checked = {};
        Array.prototype.forEach.call(tb.querySelectorAll('input:checked'), function (c) { checked[c.value] = 1; });
        while (tb.firstChild) tb.removeChild(tb.firstChild);
        runs.forEach(function (r) {
          var tr = el('tr', null, 'run-row' + (r.status ? ' status-' + r.status : ''));
          tr.setAttribute('data-run', r.id);
          var cb = el('input'); cb.type = 'checkbox'; cb.value = r.id; cb.checked = !!checked[r.id];
          var cells = [cb].concat(cols.map(function (c) {
            var k = c[1], v = r[k];
            if (k === 'id') return link(runHref(r.id), r.id);
            if (k === 'tags') return tagSpans(v, addTag);
            if (chosen) return fmtValue(v);
            if (k === 'status') return el('span', v, 'status');
            if (k === 'start_time') return fmtTime(v);
            if (k === 'duration_s') return fmtDur(v);
            if (k === 'samples_per_s') return fmtNum(v, 5);
            if (k === 'best_auc') return fmtNum(v, 6);
            if (k === 'steps') return fmtNum(v);
            if (k === 'size') return nodesWorkers(r.nodes, r.workers);
            if (k === 'note' && v) { var n = el('span', v, 'note-cell'); n.title = v; return n; }
            return v;
          }));
          cells.forEach(function (c, i) {
            var td = el('td', null, 'c' + i);
            if (c instanceof Node) td.appendChild(c); else td.textContent = c === null || c === undefined ? '-' : String(c);
            tr.appendChild(td);
          });
          tb.appendChild(tr);
          if (r.status === 'running') anyRunning = true;
        });
        if (!runs.length) { var tr = el('tr'), td = el('td', '(no runs)'); td.colSpan = cols.length + 1; tr.appendChild(td); tb.appendChild(tr); }
        body.setAttribute('data-rows', String(runs.length));
        live(anyRunning);
        if (anyRunning && !chosen) timer = setTimeout(load, POLL_MS);
      }).catch(function (e) { msg(String(e.message || e)); body.setAttribute('data-rows', 'error'); });
    }
    status.addEventListener('change', load);
    name.addEventListener('input', load);
    $('filter').addEventListener('submit', function (e) { e.preventDefault(); load(); });
    $('compare').addEventListener('click', function () {
      var ids = Array.prototype.map.call($('runs').querySelectorAll('tbody input:checked'), function (c) { return c.value; });
      if (ids.length < 2) { msg('check two runs or more to compare them'); return; }
      location.href = '/compare?' + ids.map(function (i) { return 'run=' + encodeURIComponent(i); }).join('&');
    });
    load();
  }

  /* ---- a run ---------------------------------------------------------------------------- */
  /* Event kinds marked on the curves (besides evaluations and resumes). */
  var MARKED = { restarted: 1, preempt_signal: 1, cancel_signal: 1, requeued: 1, requeue: 1, failed_attempt: 1,
    hung: 1, lost: 1, error: 1, fresh_start: 1, loader_failed: 1, preempted: 1, elastic_stop: 1 };
  /* An elastic run's change of world ("resized"): where the new world starts, and what happened. */
  function resizedTitle(d) {
    var t = 'workers ' + d.world_before + ' \u2192 ' + d.world;
    if (d.why === 'lost' && d.lost) t += ': rank ' + d.lost.rank + ' (' + d.lost.slot + ') ' + d.lost.how;
    else if (d.why === 'grow') t += ': slots back';
    if (typeof d.from_step === 'number') t += '; from the checkpoint of step ' + d.from_step;
    if (typeof d.time_lost_s === 'number') t += '; ' + d.time_lost_s.toFixed(2) + ' s lost';
    return t;
  }
  var METRICS = [['loss', 'loss'], ['samples_per_s', 'samples/s'], ['learning_rate', 'learning rate'],
    ['step_time_ms', 'step time (ms)']];
  function runPage() {
    var id = body.getAttribute('data-run'), enc = encodeURIComponent(id);
    var series = {}, after = {}, evals = [], events = [], sys = [], sysAfter = -1, run = null;
    METRICS.forEach(function (m) { series[m[0]] = []; after[m[0]] = -1; });
    var children = [], lineage = false; /* the runs resumed from this one (read once) */
    var chain = null; /* the runs this one was resumed from, oldest first: {id, upto, metrics, evals} */
    var xaxis = $('xaxis'), smooth = $('smooth'), logscale = $('logscale'), markers = $('markers');
    var q = new URLSearchParams(location.search);
    if (q.get('x') === 'time') xaxis.value = 'time';
    if (q.get('smooth')) smooth.value = q.get('smooth');
    if (q.get('log') === '1') logscale.checked = true;
    if (q.get('markers') === '0') markers.checked = false;
    if (!chartsOk()) msg(NO_CHARTS);
    function keepState() {
      var p = new URLSearchParams();
      if (xaxis.value === 'time') p.set('x', 'time');
      if (Number(smooth.value) > 0) p.set('smooth', smooth.value);
      if (logscale.checked) p.set('log', '1');
      if (!markers.checked) p.set('markers', '0');
      history.replaceState(null, '', location.pathname + (p.toString() ? '?' + p : ''));
      $('smooth-value').textContent = String(Number(smooth.value));
    }
    /* the step this run had reached at time t (its metrics' steps and times) */
    function stepAt(t) {
      var best = null, fallback = startStepOf(events);
      METRICS.forEach(function (m) {
        series[m[0]].forEach(function (p) { if (p.time <= t && (best === null || p.step > best)) best = p.step; });
      });
      return best !== null ? best : fallback !== null ? fallback : 0;
    }
    /* list (the points of this run) preceded by its ancestors' up to each fork step */
    function withChain(list, pick) {
      if (!chain || !chain.length) return list;
      var out = [];
      chain.forEach(function (a) {
        pick(a).forEach(function (p) { if (a.upto === null || p.step <= a.upto) out.push(p); });
      });
      return out.concat(list);
    }
    function marks(byTime) {
      var out = [];
      if (!markers.checked) return out;
      withChain(evals, function (a) { return a.evals; }).forEach(function (e) {
        out.push({ kind: 'eval', x: byTime ? e.time * 1000 : e.step,
          title: 'evaluation at step ' + e.step + ': AUC ' + fmtNum(e.auc) + ', logloss ' + fmtNum(e.logloss) });
      });
      var resumed = false;
      events.forEach(function (e) {
        var d = e.data && typeof e.data === 'object' ? e.data : {}, title, x;
        if (e.kind === 'resized') {
          title = resizedTitle(d);
          x = typeof d.from_step === 'number' ? d.from_step : typeof d.step === 'number' ? d.step : stepAt(e.time);
        } else if ((e.kind === 'started' || e.kind === 'restarted') && typeof d.from_step === 'number') {
          title = (e.kind === 'restarted' ? 'restarted' : 'resumed') + ' from the checkpoint of step ' + d.from_step;
          x = d.from_step;
          resumed = true;
        } else if (MARKED[e.kind]) {
          title = e.kind.replace(/_/g, ' ');
          x = stepAt(e.time);
          if (typeof d.step === 'number') { x = d.step; title += ' at step ' + d.step; }
        } else {
          return;
        }
        var why = d.message || d.reason || d.signal;
        out.push({ kind: e.kind, x: byTime ? e.time * 1000 : x,
          title: title + ' (' + fmtTime(e.time) + ')' + (why ? ': ' + why : '') });
      });
      if (chain && chain.length && !resumed) {
        var last = chain[chain.length - 1];
        out.push({ kind: 'resumed', x: byTime ? run.start_time * 1000 : last.upto,
          title: 'resumed from run ' + last.id + (last.upto === null ? '' : ' at step ' + last.upto) });
      }
      return out;
    }
    function rowsOf(list, key, w) {
      var byTime = xaxis.value === 'time', sorted = list.slice();
      if (byTime) sorted.sort(function (a, b) { return a.time - b.time; });
      var raw = sorted.map(function (m) { return m[key] === undefined ? null : m[key]; }), sm = ema(raw, w);
      return sorted.map(function (m, i) {
        var x = byTime ? new Date(m.time * 1000) : m.step;
        return w > 0 ? [x, raw[i], sm[i]] : [x, raw[i]];
      });
    }
    function drawMetric(div, list, key, label, w) {
      var xl = xaxis.value === 'time' ? 'wall time' : 'step', extra = { marks: marks(xaxis.value === 'time'),
        logscale: logscale.checked, series: {} };
      var labels = [xl, label];
      if (w > 0) {
        labels = [xl, label + ' (raw)', label + ' (smoothed ' + w + ')'];
        extra.series[labels[1]] = { color: 'rgba(31, 119, 180, 0.3)', strokeWidth: 1, drawPoints: false };
        extra.series[labels[2]] = { color: 'rgb(31, 119, 180)', strokeWidth: 2 };
      }
      draw(div, rowsOf(list, key, w), labels, xl, 'always', extra);
    }
    function drawSys() {
      var ranks = {}, byTime = {};
      sys.forEach(function (s) { ranks[s.rank] = 1; });
      var rs = Object.keys(ranks).map(Number).sort(function (a, b) { return a - b; });
      [['cpu', 'cpu_pct', 1], ['rss', 'rss_bytes', 1 / 1048576], ['gpu_mem', 'gpu_mem_bytes', 1 / 1048576],
        ['gpu_util', 'gpu_util', 1]].forEach(function (c) {
        var any = false, at = {};
        sys.forEach(function (s) {
          var v = s[c[1]];
          if (!at[s.time]) at[s.time] = rs.map(function () { return null; });
          if (v !== null && v !== undefined) { at[s.time][rs.indexOf(s.rank)] = v * c[2]; any = true; }
        });
        var rows = Object.keys(at).map(Number).sort(function (a, b) { return a - b; }).map(function (t) {
          return [new Date(t * 1000)].concat(at[t]);
        });
        byTime[c[0]] = any;
        var box = $('box-sys-' + c[0]);
        if (box) box.style.display = any ? '' : 'none';
        if (any || !box) draw($('chart-sys-' + c[0]), any ? rows : [], ['wall time'].concat(rs.map(function (r) { return 'rank ' + r; })),
          'wall time', 'always', { marks: marks(true) });
      });
      var note = [];
      if (!sys.length) note.push('no system metrics recorded (a run from before they were, or no report yet)');
      else {
        if (!byTime.gpu_mem) note.push('no GPU memory recorded (the CPU backend)');
        if (!byTime.gpu_util) note.push('GPU utilisation is not measured (the CUDA runtime does not give it)');
      }
      $('sys-note').textContent = note.join('; ');
    }
    function redraw() {
      keepState();
      var w = Number(smooth.value) || 0;
      METRICS.forEach(function (m) {
        drawMetric($('chart-' + m[0]), withChain(series[m[0]], function (a) { return a.metrics[m[0]] || []; }), 'value', m[1], w);
      });
      var ev = withChain(evals, function (a) { return a.evals; });
      drawMetric($('chart-auc'), ev, 'auc', 'AUC', 0);
      drawMetric($('chart-logloss'), ev, 'logloss', 'logloss', 0);
      drawSys();
    }
    function render(j) {
      var r = j.run, last = {};
      (j.last_metrics || []).forEach(function (m) { last[m.name] = m.value; });
      var st = $('run-status'); st.textContent = r.status; st.className = 'status status-' + r.status;
      var tg = $('run-tags'); while (tg.firstChild) tg.removeChild(tg.firstChild); tg.appendChild(tagSpans(r.tags));
      $('run-note').textContent = r.note || '';
      var best = null;
      evals.forEach(function (e) { if (e.auc !== null && (best === null || e.auc > best)) best = e.auc; });
      fillKV($('summary'), [
        ['status', r.status], ['reason', r.reason], ['start', fmtTime(r.start_time)], ['end', fmtTime(r.end_time)],
        ['duration', fmtDur((r.end_time || Date.now() / 1000) - r.start_time)],
        ['last step', series.loss.length ? series.loss[series.loss.length - 1].step : null],
        ['last loss', fmtNum(last.loss)], ['samples/s', fmtNum(last.samples_per_s, 5)], ['best AUC', fmtNum(best)],
        ['nodes, workers', nodesWorkers(r.nodes, r.workers)],
        ['hosts', r.hosts], ['SLURM job', r.slurm_job_id], ['restarts', r.restarts],
        ['resumed from', r.resumed_from ? link(runHref(r.resumed_from), r.resumed_from) : null],
        ['resumed by', children.length ? children.reduce(function (span, c, i) {
          if (i) span.appendChild(document.createTextNode(', '));
          span.appendChild(link(runHref(c), c));
          return span;
        }, el('span', null, 'resumed-by')) : null],
        ['git', r.git_hash], ['command', r.cmdline], ['checkpoints at', r.ckpt_url],
        ['final metrics', r.final_metrics === null ? null : JSON.stringify(r.final_metrics)]
      ]);
      var sums = j.sysmetrics_summary || [];
      fillTable($('sysmetrics'), ['rank', 'samples', 'mean CPU (% of a core)', 'peak RSS', 'peak GPU memory'],
        sums.map(function (s) {
          return [s.rank, s.samples, s.mean_cpu_pct === null ? null : s.mean_cpu_pct.toFixed(1), fmtBytes(s.peak_rss_bytes),
            fmtBytes(s.peak_gpu_mem_bytes)];
        }));
      var cfg = r.config && typeof r.config === 'object' ? r.config : {};
      fillKV($('config'), Object.keys(cfg).sort().map(function (k) {
        var v = cfg[k]; return [k, typeof v === 'object' && v !== null ? JSON.stringify(v) : v];
      }));
      fillTable($('checkpoints'), ['step', 'bytes', 'stall (s)', 'verify state', 'time', 'manifest'],
        (j.checkpoints || []).map(function (c) {
          return [c.step, fmtBytes(c.bytes), fmtNum(c.stall_s, 3), 'committed', fmtTime(c.time), c.manifest_url];
        }));
      fillTable($('attempts'), ['attempt', 'workers', 'nodes', 'hosts', 'from step', 'start', 'end', 'ended by'],
        (j.attempts || []).map(function (a) {
          return [a.attempt, a.workers, a.nodes, a.hosts, a.from_step === null ? 0 : a.from_step, fmtTime(a.start_time),
            fmtTime(a.end_time), a.ended];
        }));
      fillTable($('processes'), ['attempt', 'rank', 'host', 'pid', 'ended', 'start', 'end'],
        (j.processes || []).map(function (p) {
          return [p.attempt, p.rank, p.host, p.pid, el('span', p.ended, p.ended === 'exit 0' || p.ended === 'running' ? '' : 'bad'),
            fmtTime(p.start_time), fmtTime(p.end_time)];
        }));
      fillTable($('events'), ['time', 'kind', 'data'], (j.events || []).map(function (e) {
        var d = e.data;
        return [fmtTime(e.time), el('span', e.kind, 'event event-' + e.kind),
          d === null || d === undefined ? null : typeof d === 'object' ? JSON.stringify(d) : String(d)];
      }));
    }
    function fetchSeries(name) {
      var u = '/api/runs/' + enc + '/metrics?name=' + encodeURIComponent(name) + (after[name] >= 0 ? '&after=' + after[name] : '');
      return getJSON(u).then(function (rows) {
        rows.forEach(function (m) { series[name].push(m); if (m.step > after[name]) after[name] = m.step; });
      });
    }
    /* The runs this one was resumed from (read once): each with its metrics and
     * evaluations, and the step its successor resumed from (upto). */
    function loadChain(r, evs) {
      var out = [], from = startStepOf(evs);
      function up(rid, upto, depth) {
        if (!rid || depth > 16) return Promise.resolve();
        var e = encodeURIComponent(rid);
        return Promise.all([getJSON('/api/runs/' + e), getJSON('/api/runs/' + e + '/metrics')]).then(function (res) {
          var a = { id: rid, upto: upto, metrics: {}, evals: res[0].evals || [] };
          res[1].forEach(function (m) { (a.metrics[m.name] = a.metrics[m.name] || []).push(m); });
          out.unshift(a);
          return up(res[0].run.resumed_from, startStepOf(res[0].events || []), depth + 1);
        }).catch(function () { /* a removed ancestor: the chain stops there */ });
      }
      return up(r.resumed_from, from, 0).then(function () {
        chain = out;
        var c = $('chain');
        while (c.firstChild) c.removeChild(c.firstChild);
        if (!out.length) return;
        c.appendChild(document.createTextNode('resumed chain: the curves begin with '));
        out.forEach(function (a, i) {
          if (i) c.appendChild(document.createTextNode(', then '));
          c.appendChild(link(runHref(a.id), a.id));
          c.appendChild(document.createTextNode(a.upto === null ? '' : ' (to step ' + a.upto + ')'));
        });
        c.appendChild(document.createTextNode(', then this run'));
      });
    }
    /* the step of the checkpoint a run started from (its start event), or null */
    function startStepOf(evs) {
      var s = null;
      evs.forEach(function (e) {
        if (s === null && e.kind === 'started' && e.data && typeof e.data.from_step === 'number') s = e.data.from_step;
      });
      return s;
    }
    function refresh() {
      getJSON('/api/runs/' + enc).then(function (j) {
        evals = j.evals || [];
        events = j.events || [];
        run = j.run;
        var kids = lineage ? null : getJSON('/api/runs?limit=0').then(function (all) {
          children = all.filter(function (x) { return x.resumed_from === id; }).map(function (x) { return x.id; });
          lineage = true;
        });
        var anc = chain ? null : loadChain(j.run, events);
        var sy = getJSON('/api/runs/' + enc + '/sysmetrics' + (sysAfter >= 0 ? '?after=' + sysAfter : '')).then(function (rows) {
          rows.forEach(function (r) { sys.push(r); if (r.seq > sysAfter) sysAfter = r.seq; });
        });
        return Promise.all(METRICS.map(function (m) { return fetchSeries(m[0]); }).concat([kids, anc, sy])).then(function () {
          msg(chartsOk() ? '' : NO_CHARTS);
          render(j);
          redraw();
          var running = j.run.status === 'running';
          live(running);
          if (running) setTimeout(refresh, POLL_MS);
        });
      }).catch(function (e) { msg(String(e.message || e)); setTimeout(refresh, POLL_MS * 3); });
    }
    [xaxis, logscale, markers].forEach(function (c) { c.addEventListener('change', redraw); });
    smooth.addEventListener('input', redraw);
    refresh();
  }

  /* ---- compare ------------------------------------------------------------------------------ */
  function comparePage() {
    var q = new URLSearchParams(location.search), ids = q.getAll('run');
    (q.get('runs') || '').split(',').forEach(function (i) { if (i) ids.push(i); });
    var metric = $('metric');
    if (q.get('metric')) metric.value = q.get('metric');
    if (ids.length < 1) { msg('no runs: open /compare?run=ID&run=ID (or check runs on the list)'); return; }
    if (!chartsOk()) msg(NO_CHARTS);
    var timer = null;
    function load() {
      if (timer) { clearTimeout(timer); timer = null; }
      var m = metric.value, isEval = m === 'auc' || m === 'logloss';
      Promise.all(ids.map(function (id) {
        var enc = encodeURIComponent(id);
        return getJSON('/api/runs/' + enc).then(function (j) {
          if (isEval) return { run: j.run, rows: (j.evals || []).map(function (e) { return { step: e.step, value: e[m] }; }) };
          return getJSON('/api/runs/' + enc + '/metrics?name=' + encodeURIComponent(m)).then(function (rows) {
            return { run: j.run, rows: rows };
          });
        });
      })).then(function (all) {
        var steps = {}, labels = ['step'], running = false;
        all.forEach(function (a, i) {
          labels.push(a.run.name ? a.run.id + ' (' + a.run.name + ')' : a.run.id);
          a.rows.forEach(function (r) {
            if (!steps[r.step]) steps[r.step] = all.map(function () { return null; });
            steps[r.step][i] = r.value;
          });
          if (a.run.status === 'running') running = true;
        });
        var rows = Object.keys(steps).map(Number).sort(function (a, b) { return a - b; }).map(function (s) {
          return [s].concat(steps[s]);
        });
        draw($('chart-compare'), rows, labels, 'step', 'always');
        fillTable($('compare-runs'), ['run', 'name', 'status', 'points'], all.map(function (a) {
          return [link(runHref(a.run.id), a.run.id), a.run.name, a.run.status, a.rows.length];
        }));
        msg(chartsOk() ? '' : NO_CHARTS);
        live(running);
        if (running && m === metric.value) timer = setTimeout(load, POLL_MS);
      }).catch(function (e) { msg(String(e.message || e)); });
    }
    metric.addEventListener('change', load);
    load();
    /* the final metrics (one column per run) and the config keys that differ */
    getJSON('/api/compare?' + ids.map(function (i) { return 'run=' + encodeURIComponent(i); }).join('&')).then(function (c) {
      var head = ['run'].concat(c.runs.map(function (r) { return r.name ? r.id + ' (' + r.name + ')' : r.id; }));
      function rows(obj) { return Object.keys(obj).map(function (k) { return [k].concat(obj[k].map(fmtValue)); }); }
      fillTable($('compare-metrics'), head, rows(c.final_metrics));
      fillTable($('config-diff'), head, rows(c.config_diff));
      $('config-diff-title').textContent = 'config: ' + Object.keys(c.config_diff).length + ' differ, ' + c.config_equal + ' the same';
      body.setAttribute('data-diff', String(Object.keys(c.config_diff).length));
    }).catch(function (e) { msg(String(e.message || e)); });
  }

  var page = body.getAttribute('data-page');
  if (page === 'list') listPage();
  else if (page === 'run') runPage();
  else if (page === 'compare') comparePage();
})();
