// groupcoord console: keep the page's live part current without a reload.
// Every poll_ms, fetch this page's address with fragment=1 (the server renders the same part again,
// escaped) and swap it in; pause while the tab is hidden; say so when the console stops answering.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("status");
  if (!live) { return; }
  var every = parseInt(live.getAttribute("data-poll-ms"), 10) || 1000;
  var timer = null;

  function say(text, bad) {
    if (!status) { return; }
    status.textContent = text;
    status.className = bad ? "status bad" : "status";
  }

  function address() {
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    return url.toString();
  }

  function poll() {
    timer = null;
    if (document.hidden) { return; }
    fetch(address(), { credentials: "same-origin", cache: "no-store" }).then(function (answer) {
      if (answer.status === 401) { say("token needed: reload", true); return null; }
      if (!answer.ok) { say("console answered " + answer.status, true); return null; }
      return answer.text();
    }).then(function (html) {
      if (html !== null && html !== undefined) {
        live.innerHTML = html;
        say("live, " + new Date().toLocaleTimeString(), false);
      }
    }).catch(function () {
      say("console not reachable", true);
    }).then(schedule);
  }

  function schedule() {
    if (timer === null) { timer = window.setTimeout(poll, every); }
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && timer === null) { poll(); }
  });

  // the group filter: typing narrows the list at once, and the address keeps the filter
  var filter = document.getElementById("filter-input");
  if (filter) {
    filter.addEventListener("input", function () {
      var url = new URL(window.location.href);
      url.searchParams.set("q", filter.value);
      url.searchParams.delete("page");
      window.history.replaceState(null, "", url.toString());
      if (timer !== null) { window.clearTimeout(timer); timer = null; }
      poll();
    });
  }

  // write actions ask first (forms carrying data-confirm)
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });

  schedule();
})();
