// Berth dashboard: the page script. No framework: htmx does the requests and swaps; this file
// keeps the token, routes `#page` links, pauses live regions while a person edits in them, and
// shows errors in the page. No inline code anywhere, so the page runs under `script-src 'self'`.
(function () {
  'use strict';

  var KEY = 'berth-token';
  // `#page`, `#page/id` or `#page?filters`; anything else shows the overview.
  var ROUTE = /^#(overview|nodes|actors|tasks|groups|jobs)(\/[A-Za-z0-9._~%-]+)?(\?[A-Za-z0-9._~%&=+-]*)?$/;

  var main = document.getElementById('main');
  var alertBox = document.getElementById('alert');
  var login = document.getElementById('login');
  var tokenInput = document.getElementById('token');
  var forget = document.getElementById('forget');

  function token() {
    return sessionStorage.getItem(KEY);
  }

  function clearMessages() {
    alertBox.replaceChildren();
    var current = document.getElementById('flash');
    if (current) current.replaceChildren();
  }

  // Shows an error answer: the head's HTML fragment when it sent one, else plain text. A
  // `transient` message (the head unreachable) goes away by itself once a poll works again.
  function showError(xhr, fallback, transient) {
    var type = (xhr && xhr.getResponseHeader('Content-Type')) || '';
    if (xhr && type.indexOf('text/html') === 0 && xhr.responseText) {
      alertBox.innerHTML = xhr.responseText;
    } else {
      var box = document.createElement('div');
      box.className = 'error';
      if (transient) box.setAttribute('data-transient', '');
      var text = document.createElement('p');
      text.textContent = fallback;
      box.appendChild(text);
      alertBox.replaceChildren(box);
    }
  }

  function showLogin() {
    main.replaceChildren(); // stops every live region's polling
    document.body.classList.add('signed-out');
    main.hidden = true;
    login.hidden = false;
    forget.hidden = true;
    tokenInput.focus();
  }

  function route() {
    if (!token()) {
      showLogin();
      return;
    }
    document.body.classList.remove('signed-out');
    login.hidden = true;
    main.hidden = false;
    forget.hidden = false;
    var match = ROUTE.exec(location.hash);
    var page = match ? match[1] : 'overview';
    var url = '/ui/' + page + (match && match[2] ? match[2] : '') + (match && match[3] ? match[3] : '');
    document.querySelectorAll('nav [data-route]').forEach(function (link) {
      if (link.getAttribute('data-route') === page) {
        link.setAttribute('aria-current', 'page');
      } else {
        link.removeAttribute('aria-current');
      }
    });
    htmx.ajax('GET', url, { target: '#main', swap: 'innerHTML' });
  }

  // A live region is busy while a person works in it: focus on one of its controls, or text
  // typed in one of its fields. Its poll waits, so nothing they do is swapped away.
  function busy(region) {
    var active = document.activeElement;
    if (active && active !== region && region.contains(active) &&
        active.matches('input, select, textarea, button, summary')) {
      return true;
    }
    return Array.prototype.some.call(region.querySelectorAll('input[type=text]'), function (input) {
      return input.value !== '';
    });
  }

  document.addEventListener('htmx:configRequest', function (event) {
    var value = token();
    if (value) event.detail.headers['Authorization'] = 'Bearer ' + value;
  });

  document.addEventListener('htmx:beforeRequest', function (event) {
    var elt = event.detail.elt;
    var poll = elt && elt.classList && elt.classList.contains('live');
    if (poll && (document.hidden || busy(elt))) {
      event.preventDefault();
      return;
    }
    // A person's action starts with a clean slate of messages.
    if (!poll) alertBox.replaceChildren();
  });

  document.addEventListener('htmx:responseError', function (event) {
    var xhr = event.detail.xhr;
    showError(xhr, 'The head answered ' + xhr.status + ' ' + xhr.statusText + '.');
    if (xhr.status === 401) {
      sessionStorage.removeItem(KEY);
      showLogin();
    }
  });

  document.addEventListener('htmx:sendError', function () {
    showError(null, 'The head cannot be reached: is it still running? The page tries again every 2 s.', true);
  });

  document.addEventListener('htmx:afterRequest', function (event) {
    // A poll that works again clears the "cannot be reached" message.
    var elt = event.detail.elt;
    if (event.detail.successful && elt && elt.classList && elt.classList.contains('live')) {
      if (alertBox.querySelector('[data-transient]')) alertBox.replaceChildren();
    }
  });

  // The dismiss button of an error fragment.
  alertBox.addEventListener('click', function (event) {
    if (event.target.closest('[data-dismiss]')) alertBox.replaceChildren();
  });

  login.addEventListener('submit', function (event) {
    event.preventDefault();
    var value = tokenInput.value.trim();
    if (!value) return;
    sessionStorage.setItem(KEY, value);
    tokenInput.value = '';
    clearMessages();
    route();
    watch();
  });

  forget.addEventListener('click', function () {
    sessionStorage.removeItem(KEY);
    clearMessages();
    showLogin();
  });

  window.addEventListener('hashchange', function () {
    clearMessages();
    route();
  });

  // Live regions look again when the cluster changed: the head's change stream
  // (`GET /api/v1/watch`, read with fetch so the token goes in a header) says when, and a
  // burst of changes is one look (at most every 250 ms). Without the stream (it failed, or the
  // browser cannot read one), they look every 2 s until it is back.
  var since = null;
  var streaming = false;
  var soon = null;
  var fallback = null;

  function changed() {
    if (soon) return;
    soon = setTimeout(function () {
      soon = null;
      document.querySelectorAll('.live').forEach(function (region) {
        htmx.trigger(region, 'berth:changed');
      });
    }, 250);
  }

  function poll(on) {
    if (on && !fallback) fallback = setInterval(changed, 2000);
    if (!on && fallback) {
      clearInterval(fallback);
      fallback = null;
    }
  }

  function watch() {
    if (streaming || !token() || !window.fetch || !window.TextDecoder) {
      if (token()) poll(true);
      return;
    }
    streaming = true;
    var url = '/api/v1/watch?' + (since ? 'since=' + since : 'listing=false');
    var refused = false;
    fetch(url, { headers: { Authorization: 'Bearer ' + token() } }).then(function (response) {
      if (response.status === 410) since = null; // too far behind: start from now
      refused = response.status === 401; // a new token starts it again (the login form)
      if (!response.ok || !response.body) throw new Error('the stream answered ' + response.status);
      poll(false);
      var reader = response.body.getReader();
      var decoder = new TextDecoder();
      var text = '';
      function read() {
        return reader.read().then(function (chunk) {
          if (chunk.done) throw new Error('the stream ended');
          text += decoder.decode(chunk.value, { stream: true });
          var end;
          while ((end = text.indexOf('\n\n')) >= 0) {
            var block = text.slice(0, end);
            text = text.slice(end + 2);
            var id = /^id: ?(\d+)$/m.exec(block);
            if (id) since = id[1];
            if (/^event: ?change$/m.test(block)) changed();
          }
          return read();
        });
      }
      return read();
    }).catch(function () {
      streaming = false;
      poll(!refused);
      if (!refused) setTimeout(watch, 2000);
    });
  }

  // Logs in the page: `GET /api/v1/logs/{id}` read with fetch (the token goes in a header),
  // streamed into the panel's <pre>. The head's log holds every attempt, each after a
  // `=== berth: ID attempt N …` line; the attempt picked is cut out here. The panel keeps the
  // last LOG_KEEP characters (a tail), and a follow stops when the panel leaves the page.
  var LOG_KEEP = 200000;
  var logReading = null;

  function stopLog() {
    if (logReading) logReading.abort();
    logReading = null;
  }

  function keepAttempt(text, attempt, state) {
    // `state.inside`: whether the text so far is in the attempt picked; lines are cut whole.
    if (!attempt) return text;
    var out = '';
    var lines = (state.rest + text).split('\n');
    state.rest = lines.pop();
    lines.forEach(function (line) {
      var header = /^=== berth: \S+ attempt (\d+)/.exec(line);
      if (header) state.inside = header[1] === attempt;
      if (state.inside) out += line + '\n';
    });
    return out;
  }

  function showLog(panel) {
    stopLog();
    var form = panel.querySelector('[data-log-form]');
    var pre = panel.querySelector('[data-log-text]');
    var status = panel.querySelector('[data-log-status]');
    var id = panel.getAttribute('data-logs');
    var stream = form.elements.stream.value;
    var attempt = form.elements.attempt.value;
    var follow = form.elements.follow.checked && !form.elements.follow.disabled;
    var controller = new AbortController();
    logReading = controller;
    pre.textContent = '';
    status.textContent = 'Reading ' + (stream === 'err' ? 'stderr' : 'stdout') + ' of ' + id + '…';
    var url = '/api/v1/logs/' + encodeURIComponent(id) + '?stream=' + stream + (follow ? '&follow=true' : '');
    var state = { rest: '', inside: false };
    fetch(url, { headers: { Authorization: 'Bearer ' + token() }, signal: controller.signal })
      .then(function (response) {
        if (!response.ok) {
          return response.text().then(function (body) {
            var message = body;
            try { message = JSON.parse(body).message; } catch (e) { /* plain text */ }
            throw new Error('The head answered ' + response.status + ': ' + message);
          });
        }
        status.textContent = follow ? 'Following: new output appears as it is written.' : 'Reading…';
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        function read() {
          return reader.read().then(function (chunk) {
            if (!document.body.contains(pre)) { controller.abort(); return; }
            if (chunk.done) {
              pre.textContent += keepAttempt(decoder.decode() + '\n', attempt, state);
              status.textContent = 'The whole log' + (attempt ? ' of attempt ' + attempt : '') + ' (' + pre.textContent.length + ' characters shown).';
              if (logReading === controller) logReading = null;
              return;
            }
            var text = pre.textContent + keepAttempt(decoder.decode(chunk.value, { stream: true }), attempt, state);
            if (text.length > LOG_KEEP) text = text.slice(text.length - LOG_KEEP);
            var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
            pre.textContent = text;
            if (atEnd) pre.scrollTop = pre.scrollHeight;
            return read();
          });
        }
        return read();
      })
      .catch(function (err) {
        if (controller.signal.aborted) {
          status.textContent = 'Stopped.';
          return;
        }
        status.textContent = err.message;
        if (logReading === controller) logReading = null;
      });
  }

  document.addEventListener('submit', function (event) {
    var form = event.target.closest && event.target.closest('[data-log-form]');
    if (!form) return;
    event.preventDefault();
    showLog(form.closest('[data-logs]'));
  });

  document.addEventListener('click', function (event) {
    if (event.target.closest && event.target.closest('[data-log-stop]')) stopLog();
  });

  window.addEventListener('hashchange', stopLog);

  // After htmx has read its configuration (its own DOMContentLoaded handler runs first).
  document.addEventListener('DOMContentLoaded', function () {
    if (!ROUTE.test(location.hash)) history.replaceState(null, '', '#overview');
    route();
    watch();
  });
})();
