/* The participant page's resumable upload (tus 1.0, with the vendored tus-js-client served beside this file).
 *
 * Served by the server itself (script-src 'self': no inline script, no CDN). The upload authenticates with the
 * page's session cookie and its CSRF token in an X-CSRF-Token header; tus-js-client keeps the upload's address
 * in localStorage, so a reload resumes it too, and retries a dropped connection (a restarted server) from the
 * offset the server holds. The last answer names the submission the upload became (Grader-Submission).
 */
(function () {
  "use strict";
  var config = document.getElementById("upload-config");
  if (!config || !window.tus || !window.tus.isSupported) {
    return;
  }
  var input = document.getElementById("upload-file");
  var sample = document.getElementById("upload-sample");
  var button = document.getElementById("upload-start");
  var bar = document.getElementById("upload-progress");
  var status = document.getElementById("upload-status");

  function say(text, state) {
    status.textContent = text;
    status.setAttribute("data-state", state);
  }

  function detail(error) {
    var response = error && error.originalResponse;
    if (response) {
      try {
        return JSON.parse(response.getBody()).detail || String(response.getStatus());
      } catch (ignored) {
        return "server answered " + response.getStatus();
      }
    }
    return String(error && error.message ? error.message : error);
  }

  button.addEventListener("click", function () {
    var file = input.files && input.files[0];
    if (!file) {
      say("choose the archive to upload first", "error");
      return;
    }
    button.disabled = true;
    bar.value = 0;
    say("uploading", "uploading");
    var upload = new window.tus.Upload(file, {
      endpoint: config.getAttribute("data-endpoint") + (sample && sample.checked ? "?sample=true" : ""),
      headers: { "X-CSRF-Token": config.getAttribute("data-csrf") },
      metadata: { filename: file.name },
      // Long enough for a server restart: about two minutes of tries before the page gives up.
      retryDelays: [0, 1000, 2000, 3000, 5000, 5000, 10000, 10000, 10000, 20000, 20000, 30000],
      removeFingerprintOnSuccess: true,
      onProgress: function (sent, total) {
        bar.value = total ? Math.floor((100 * sent) / total) : 0;
        say("uploading: " + (sent / 1e6).toFixed(1) + " of " + (total / 1e6).toFixed(1) + " MB", "uploading");
      },
      onError: function (error) {
        button.disabled = false;
        say("error: " + detail(error), "error");
      },
      onSuccess: function (payload) {
        var response = payload && payload.lastResponse;
        var id = response ? response.getHeader("Grader-Submission") : null;
        bar.value = 100;
        button.disabled = false;
        status.setAttribute("data-submission", id || "");
        say("uploaded: submission " + (id || "(reload the page to see it)"), "done");
      },
    });
    upload.findPreviousUploads().then(function (previous) {
      if (previous.length) {
        upload.resumeFromPreviousUpload(previous[0]);
      }
      upload.start();
    });
  });
})();
