// Live updates and small conveniences for the review page of `kubectl bundle ui`.
// The server sends the name of each Bundle that changes (server-sent events); the page then
// fetches itself again and swaps its live regions, without moving the reader's focus.
(function () {
  "use strict";
  const body = document.body;
  const watched = body.dataset.bundle || "*";
  const source = body.dataset.liveSrc || null;
  let pending = null;

  async function refresh() {
    pending = null;
    let response;
    try {
      response = await fetch(source || location.href, { credentials: "same-origin" });
    } catch (_) {
      return;
    }
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    let changed = false;
    for (const region of document.querySelectorAll("[data-live]")) {
      const next = fresh.getElementById(region.id);
      // A region the reader is working in stays as it is.
      if (!next || region.contains(document.activeElement)) continue;
      if (next.outerHTML === region.outerHTML) continue;
      region.replaceWith(document.importNode(next, true));
      changed = true;
    }
    const notice = document.getElementById("changed-notice");
    if (notice && changed) notice.classList.add("shown");
  }

  if (window.EventSource && document.querySelector("[data-live]")) {
    // The server tells of changes made between this page's rendering and the connection (a
    // decision the provisioner handled at once, say), and after a reconnection, of those
    // missed meanwhile.
    const since = body.dataset.liveSince;
    const events = new EventSource(since ? "/events?since=" + since : "/events");
    events.addEventListener("bundle", function (event) {
      if (watched !== "*" && event.data !== watched && event.data !== "*") return;
      // A burst of changes makes one refresh.
      if (!pending) pending = setTimeout(refresh, 400);
    });
  }

  // Forms that change the cluster ask first when they say so (rollback).
  document.addEventListener("submit", function (event) {
    const question = event.target.dataset.confirm;
    if (question && !window.confirm(question)) event.preventDefault();
  });

  // "/" jumps to the filter, as in many tools; Escape leaves it.
  document.addEventListener("keydown", function (event) {
    const filter = document.getElementById("filter-text");
    if (!filter) return;
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
    if (event.key === "/" && !typing) {
      event.preventDefault();
      filter.focus();
    } else if (event.key === "Escape" && document.activeElement === filter) {
      filter.blur();
    }
  });

  // The filter applies as soon as a choice changes.
  for (const select of document.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", function () { select.form.requestSubmit(); });
  }
})();
