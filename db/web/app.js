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

  /* Draws (or redraws) a chart into div; rows: [[x, y...]...]. Sets data-points to
   * the rows dygraphs holds once it has drawn them. */
  var graphs = {};
  function draw(div, rows, labels, xlabel, legend) {
    if (!chartsOk()) { div.textContent = NO_CHARTS; div.className += ' empty'; return; }
    if (!rows.length) {
      if (graphs[div.id]) { graphs[div.id].destroy(); delete graphs[div.id]; }
      div.textContent = '(no values)';
      div.setAttribute('data-points', '0');
      return;
    }
    var opts = {
      labels: labels, xlabel: xlabel, connectSeparatedPoints: true, legend: legend || 'follow', labelsSeparateLines: true,
      drawPoints: rows.length < 60, pointSize: rows.length < 4 ? 4 : 2, strokeWidth: 1.5, animatedZooms: false,
      axes: { y: { axisLabelWidth: 64 } },
      drawCallback: function (g) { div.setAttribute('data-points', String(g.numRows())); }
    };
    var g = graphs[div.id];
    if (g && g.getLabels().join('\u0001') === labels.join('\u0001') && g.getOption('xlabel') === xlabel) {
      g.updateOptions({ file: rows, drawPoints: opts.drawPoints, pointSize: opts.pointSize });
    } else {
      if (g) g.destroy();
      div.textContent = '';
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
  function runPage() {
    var id = body.getAttribute('data-run'), enc = encodeURIComponent(id);
    var series = { loss: [], samples_per_s: [] }, after = { loss: -1, samples_per_s: -1 }, evals = [];
    var children = [], lineage = false; /* the runs resumed from this one (read once) */
    var xaxis = $('xaxis');
    if (!chartsOk()) msg(NO_CHARTS);
    function rowsOf(list, key) {
      var byTime = xaxis.value === 'time', rows = list.map(function (m) {
        return [byTime ? new Date(m.time * 1000) : m.step, m[key] === undefined ? null : m[key]];
      });
      if (byTime) rows.sort(function (a, b) { return a[0] - b[0]; });
      return rows;
    }
    function redraw() {
      var xl = xaxis.value === 'time' ? 'wall time' : 'step';
      draw($('chart-loss'), rowsOf(series.loss, 'value'), [xl, 'loss'], xl);
      draw($('chart-samples_per_s'), rowsOf(series.samples_per_s, 'value'), [xl, 'samples/s'], xl);
      draw($('chart-auc'), rowsOf(evals, 'auc'), [xl, 'AUC'], xl);
      draw($('chart-logloss'), rowsOf(evals, 'logloss'), [xl, 'logloss'], xl);
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
      var cfg = r.config && typeof r.config === 'object' ? r.config : {};
      fillKV($('config'), Object.keys(cfg).sort().map(function (k) {
        var v = cfg[k]; return [k, typeof v === 'object' && v !== null ? JSON.stringify(v) : v];
      }));
      fillTable($('checkpoints'), ['step', 'bytes', 'stall (s)', 'verify state', 'time', 'manifest'],
        (j.checkpoints || []).map(function (c) {
          return [c.step, fmtBytes(c.bytes), fmtNum(c.stall_s, 3), 'committed', fmtTime(c.time), c.manifest_url];
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
    function refresh() {
      getJSON('/api/runs/' + enc).then(function (j) {
        evals = j.evals || [];
        var kids = lineage ? null : getJSON('/api/runs?limit=0').then(function (all) {
          children = all.filter(function (x) { return x.resumed_from === id; }).map(function (x) { return x.id; });
          lineage = true;
        });
        return Promise.all([fetchSeries('loss'), fetchSeries('samples_per_s'), kids]).then(function () {
          msg(chartsOk() ? '' : NO_CHARTS);
          render(j);
          redraw();
          var running = j.run.status === 'running';
          live(running);
          if (running) setTimeout(refresh, POLL_MS);
        });
      }).catch(function (e) { msg(String(e.message || e)); setTimeout(refresh, POLL_MS * 3); });
    }
    xaxis.addEventListener('change', redraw);
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
