// pyperf flame graph: zoom, search and labels fitted to the window's width. `pyperfConfig` is written by pyperf
// just before this script; the frames are the <g class="f"> elements of #frames, each with its position in samples
// (fg:x, fg:w), its depth (fg:d) and, when the label was cut, the whole label (fg:l).
(function () {
  "use strict";
  var C = pyperfConfig;
  var FG = "urn:pyperf:flamegraph";
  var SVGNS = "http://www.w3.org/2000/svg";
  var SEARCH_FILL = "rgb(230,0,230)";
  var svg = document.documentElement;
  var byId = function (id) { return document.getElementById(id); };
  var framesEl = byId("frames");
  var details = byId("details");
  var unzoomBtn = byId("unzoom");
  var searchBtn = byId("search");
  var matchedEl = byId("matched");
  var levelsEl = byId("levels");
  var allBtn = byId("all-levels");
  var background = byId("background");
  var titleEl = byId("title");
  var titleText = titleEl.textContent;
  var detailsIdle = details.textContent;

  var frames = [];
  var zoomed = null;
  var showAll = C.levels === 0;
  var searchTerm = "";
  var charWidth = 0;

  var groups = framesEl.getElementsByTagNameNS(SVGNS, "g");
  for (var i = 0; i < groups.length; i++) {
    var g = groups[i];
    var title = g.getElementsByTagNameNS(SVGNS, "title")[0];
    var info = title ? title.textContent : "";
    var text = g.getElementsByTagNameNS(SVGNS, "text")[0];
    var label = g.hasAttributeNS(FG, "l") ? g.getAttributeNS(FG, "l") : text.textContent;
    var rect = g.getElementsByTagNameNS(SVGNS, "rect")[0];
    frames.push({
      g: g,
      rect: rect,
      text: text,
      x: +g.getAttributeNS(FG, "x"),
      w: +g.getAttributeNS(FG, "w"),
      d: +g.getAttributeNS(FG, "d"),
      label: label,
      chars: Array.from(label),
      ascii: /^[\x20-\x7e]*$/.test(label),
      // The title is `NAME (N samples, P%)`: the name is what a search looks at.
      name: info.slice(0, Math.max(0, info.lastIndexOf(" ("))),
      info: info,
      fill: rect.getAttribute("fill"),
      match: false
    });
    g.pyperfFrame = frames[frames.length - 1];
  }

  function measureCharWidth() {
    var probe = document.createElementNS(SVGNS, "text");
    probe.textContent = "abcdefghijklmnopqrstuvwxyz0123456789ABCD";
    framesEl.appendChild(probe);
    var w = probe.getComputedTextLength() / 40;
    framesEl.removeChild(probe);
    return w > 0 ? w : 7.2;
  }

  // The picture's width in its own units: the viewBox's when it has one (fixed width), else its CSS pixels.
  function width() {
    var vb = svg.viewBox && svg.viewBox.baseVal;
    if (vb && vb.width) return vb.width;
    return svg.getBoundingClientRect().width;
  }

  function pct(part, whole) {
    return whole > 0 ? (100 * part / whole).toFixed(2) : "0.00";
  }

  // The label cut on the right to fit `px` pixels, as pyperf did for the first view.
  function fitText(f, px) {
    var room = Math.floor((px - 6) / charWidth);
    var s = "";
    if (f.chars.length <= room) s = f.label;
    else if (room >= 4) s = f.chars.slice(0, room - 2).join("") + "..";
    if (f.text.textContent !== s) f.text.textContent = s;
    // Wide characters (CJK) take more than one monospace cell: shorten until it fits.
    if (!f.ascii && s) {
      var n = Math.min(f.chars.length, room);
      while (n > 2 && f.text.getComputedTextLength() > px - 6) {
        n--;
        f.text.textContent = n >= 3 ? f.chars.slice(0, n - 2).join("") + ".." : "";
      }
    }
  }

  // A long title (a command line) is cut so that it stays clear of the buttons on either side; the whole of it
  // is the document's title.
  function fitTitle(W) {
    var room = W - 2 * 110;
    var chars = Array.from(titleText);
    var n = chars.length;
    titleEl.textContent = titleText;
    while (n > 4 && titleEl.getComputedTextLength() > room) {
      n = Math.max(4, Math.min(n - 1, Math.floor(n * room / titleEl.getComputedTextLength())));
      titleEl.textContent = chars.slice(0, n - 2).join("") + "..";
    }
  }

  function setClass(f, shown, parent) {
    var c = "f" + (shown ? "" : " h") + (parent ? " p" : "");
    if (f.g.getAttribute("class") !== c) f.g.setAttribute("class", c);
  }

  // Places every frame for the current zoom and level window, and fits the labels.
  function layout() {
    var zx = 0, zw = C.total, zd = 0;
    if (zoomed) { zx = zoomed.x; zw = zoomed.w; zd = zoomed.d; }
    var inside = function (f) { return f.d >= zd && f.x >= zx && f.x + f.w <= zx + zw; };
    var deepest = zd;
    for (var i = 0; i < frames.length; i++) {
      if (frames[i].d > deepest && inside(frames[i])) deepest = frames[i].d;
    }
    var levels = showAll ? C.maxDepth + 1 : Math.min(C.maxDepth + 1, C.levels);
    // The window of levels: from the root, or, when the zoomed frame's callees would not fit, from just below
    // the zoomed frame (its caller stays visible) so that its callees are shown as deep as possible.
    var base = showAll ? 0 : Math.max(0, Math.min(zd - 1, deepest - levels + 1));
    var height = C.top + levels * C.row + C.bottom;
    svg.setAttribute("height", height);
    var vb = svg.viewBox && svg.viewBox.baseVal;
    if (vb && vb.width) svg.setAttribute("viewBox", "0 0 " + vb.width + " " + height);
    background.setAttribute("height", height);

    var W = width();
    fitTitle(W);
    var span = 100 - 2 * C.pad;
    for (var j = 0; j < frames.length; j++) {
      var f = frames[j];
      var parent = f.d < zd;
      var shown = parent ? (f.x <= zx && f.x + f.w >= zx + zw) : inside(f);
      var level = f.d - base;
      if (level < 0 || level >= levels) shown = false;
      setClass(f, shown, parent);
      if (!shown) continue;
      var x = parent ? C.pad : C.pad + span * (f.x - zx) / zw;
      var w = parent ? span : span * f.w / zw;
      var y = C.icicle ? C.top + level * C.row : C.top + (levels - 1 - level) * C.row;
      f.rect.setAttribute("x", x.toFixed(4) + "%");
      f.rect.setAttribute("width", w.toFixed(4) + "%");
      f.rect.setAttribute("y", y);
      f.text.setAttribute("x", x.toFixed(4) + "%");
      f.text.setAttribute("y", y + 11);
      fitText(f, w / 100 * W);
    }

    unzoomBtn.setAttribute("class", zoomed ? "button" : "button h");
    var cut = levels < C.maxDepth + 1;
    if (cut) {
      levelsEl.textContent = "Levels " + Math.max(1, base) + "-" + (base + levels - 1) + " of " + C.maxDepth +
        " shown: click a frame to go deeper";
    } else {
      levelsEl.textContent = "";
    }
    allBtn.setAttribute("class", cut || showAll && C.levels > 0 && C.maxDepth + 1 > C.levels ? "button" : "button h");
    allBtn.textContent = showAll ? "Fewer levels" : "Show all levels";
  }

  function zoom(f) {
    zoomed = f && f.d > 0 ? f : null;
    layout();
  }

  function search(term) {
    searchTerm = term || "";
    var re = null;
    if (searchTerm) {
      try {
        re = new RegExp(searchTerm);
      } catch (e) {
        // Not a valid regular expression: plain text.
        re = new RegExp(searchTerm.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
      }
    }
    var ranges = [];
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i];
      f.match = re !== null && f.d > 0 && re.test(f.name);
      f.rect.setAttribute("fill", f.match ? SEARCH_FILL : f.fill);
      if (f.match) ranges.push([f.x, f.x + f.w]);
    }
    // A match inside another match counts once: the union of their sample ranges.
    ranges.sort(function (a, b) { return a[0] - b[0]; });
    var matched = 0, end = 0;
    for (var j = 0; j < ranges.length; j++) {
      var a = Math.max(ranges[j][0], end);
      if (ranges[j][1] > a) { matched += ranges[j][1] - a; end = ranges[j][1]; }
    }
    matchedEl.textContent = re ? "Matched: " + pct(matched, C.total) + "% (" + ranges.length + " frames)" : "";
    searchBtn.textContent = re ? "Reset Search" : "Search";
  }

  function searchPrompt() {
    if (searchTerm) {
      search("");
      return;
    }
    var term = window.prompt("Search frames (regular expression, or text)", "");
    if (term) search(term);
  }

  function frameOf(node) {
    while (node && node !== framesEl) {
      if (node.pyperfFrame) return node.pyperfFrame;
      node = node.parentNode;
    }
    return null;
  }

  framesEl.addEventListener("click", function (e) {
    var f = frameOf(e.target);
    if (f) zoom(f);
  });
  framesEl.addEventListener("mouseover", function (e) {
    var f = frameOf(e.target);
    if (!f) return;
    var s = f.info;
    if (zoomed && f.d >= zoomed.d && f !== zoomed) s += "; " + pct(f.w, zoomed.w) + "% of the zoomed frame";
    details.textContent = s;
    // The full path can be long: the levels hint on the same line makes room.
    levelsEl.style.visibility = "hidden";
  });
  framesEl.addEventListener("mouseout", function () {
    details.textContent = detailsIdle;
    levelsEl.style.visibility = "";
  });
  unzoomBtn.addEventListener("click", function () { zoom(null); });
  searchBtn.addEventListener("click", searchPrompt);
  allBtn.addEventListener("click", function () {
    showAll = !showAll;
    layout();
  });
  window.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && (e.key === "f" || e.key === "F") || e.key === "F3") {
      e.preventDefault();
      searchPrompt();
    } else if (e.key === "Escape") {
      zoom(null);
    }
  });
  var pending = false;
  window.addEventListener("resize", function () {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () {
      pending = false;
      layout();
    });
  });

  // For tests and the console: `pyperf.zoom(frame)`, `pyperf.search("re")`.
  window.pyperf = { frames: frames, zoom: zoom, search: search, layout: layout };
  charWidth = measureCharWidth();
  layout();
})();
