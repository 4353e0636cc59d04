/* The participant page's live progress: each waiting or running submission's place in the queue, estimate and
 * progress, redrawn without reloading the page.
 *
 * Served by the server itself (script-src 'self': no inline script). It asks /me/progress with the tag of what it
 * drew last; the server answers once something changed (or after about half a minute), holding no thread while it
 * waits, and the page asks again. Every text is set with textContent: nothing the server sends is read as HTML.
 * It stops asking once no submission waits or runs.
 */
(function () {
  "use strict";
  var config = document.getElementById("progress-config");
  if (!config || !window.fetch) {
    return;
  }
  var endpoint = config.getAttribute("data-endpoint");
  var seen = config.getAttribute("data-tag") || "";
  var failures = 0;

  function cell(row, name) {
    return row.querySelector("td." + name);
  }

  function draw(rows) {
    rows.forEach(function (r) {
      var tr = null;
      document.querySelectorAll("tr.submission").forEach(function (candidate) {
        if (candidate.getAttribute("data-submission") === r.id) {
          tr = candidate;
        }
      });
      if (!tr) {
        return; // uploaded after the page was drawn: the next reload shows it
      }
      cell(tr, "state").textContent = r.state;
      cell(tr, "failure").textContent = r.failure_code || "";
      cell(tr, "score").textContent = r.score;
      var progress = cell(tr, "progress");
      progress.textContent = "";
      r.lines.forEach(function (line) {
        var div = document.createElement("div");
        div.textContent = line;
        progress.appendChild(div);
      });
    });
  }

  function ask() {
    fetch(endpoint + "?seen=" + encodeURIComponent(seen), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(String(response.status));
        }
        return response.json();
      })
      .then(function (answer) {
        failures = 0;
        seen = answer.tag;
        draw(answer.rows);
        document.body.setAttribute("data-progress", answer.live ? "live" : "done");
        if (answer.live) {
          window.setTimeout(ask, 200);
        }
      })
      .catch(function () {
        failures += 1; // the server restarting, a proxy's timeout: ask again, less often each time (at most a minute)
        window.setTimeout(ask, Math.min(60000, 1000 * Math.pow(2, failures)));
      });
  }

  document.body.setAttribute("data-progress", "live");
  ask();
})();
