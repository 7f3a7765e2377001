"""Drives a real headless Chromium through the DevTools protocol and reports what a person would see, as JSON on
standard output. Used by report/tests/browser.rs; python3's standard library only.

The protocol runs over a pipe (--remote-debugging-pipe: commands on the browser's fd 3, replies on its fd 4, each
message JSON ended by a NUL byte), so no websocket client and no port are needed.

    cdp.py CHROMIUM flamegraph FILE.svg SCREENSHOT.png CLICK_PREFIX SEARCH_TERM
        Opens the SVG from a file:// URL in a 1400x900 window, then: the labels shown; a real mouse click on the
        widest shown frame whose name starts with CLICK_PREFIX and what is shown then; a click on Reset Zoom;
        Ctrl-F with SEARCH_TERM typed into the prompt and what is highlighted. Screenshots: SCREENSHOT.png (the first
        view), -zoomed.png, -search.png.
    cdp.py CHROMIUM speedscope INDEX.html PROFILE.json SCREENSHOT.png
        Opens speedscope's index.html with the profile the way the `speedscope` command does (a script calling
        speedscope.loadFileFromBase64, named by #localProfilePath=) and reports the title, the text on the page,
        the profile names in speedscope's profile menu and any dialog or error.
"""

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, chromium, width=1400, height=900):
        self.profile_dir = tempfile.mkdtemp(prefix="pyperf-chromium-")
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def fds():
            # The protocol's fixed descriptors in the browser: 3 reads commands, 4 writes replies. Copied out of
            # the way first, in case one of the pipes already is fd 3 or 4.
            r, w = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--enable-unsafe-swiftshader",
                "--use-angle=swiftshader",
                "--hide-scrollbars",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--remote-debugging-pipe",
                "--user-data-dir=" + self.profile_dir,
                "--window-size=%d,%d" % (width, height),
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.replies = {}  # replies read while waiting for an event
        self.dismiss_dialogs = False
        self.dialogs = []
        self.session = None
        self.width, self.height = width, height

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile_dir, ignore_errors=True)

    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            if time.time() > deadline:
                raise TimeoutError("no reply from chromium")
            ready, _, _ = select.select([self.from_browser], [], [], max(0.0, deadline - time.time()))
            if not ready:
                continue
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe (exit status %s)" % self.proc.poll())
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_browser, json.dumps(msg).encode() + b"\0")
        return self.next_id

    def _store(self, msg):
        if "method" not in msg:
            self.replies[msg.get("id")] = msg
            return
        self.events.append(msg)
        # A dialog nobody expects (an alert about a file speedscope cannot read) would block the page: note it
        # and close it.
        if msg["method"] == "Page.javascriptDialogOpening" and self.dismiss_dialogs:
            self.dialogs.append(msg["params"])
            self.send("Page.handleJavaScriptDialog", {"accept": True})

    def reply(self, id, method="", timeout=30):
        deadline = time.time() + timeout
        while id not in self.replies:
            self._store(self._read_message(deadline))
        reply = self.replies.pop(id)
        if "error" in reply:
            raise RuntimeError("%s: %s" % (method, reply["error"]))
        return reply.get("result", {})

    def call(self, method, params=None, session=True, timeout=30):
        return self.reply(self.send(method, params, session), method, timeout)

    def wait_event(self, method, timeout=30):
        deadline = time.time() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == method:
                    return self.events.pop(i)
            self._store(self._read_message(deadline))

    def open_page(self):
        targets = self.call("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call(
            "Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}, session=False
        )["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
        )

    def navigate(self, url):
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def eval(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s" % json.dumps(r["exceptionDetails"])[:2000])
        return r["result"].get("value")

    def click(self, x, y):
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left" if kind != "mouseMoved" else "none", "clickCount": 1},
            )

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))


# What the flame graph shows: every frame drawn (not display:none), its label and its box on the screen.
SHOWN_FRAMES = r"""
(() => {
  const out = [];
  for (const g of document.querySelectorAll('#frames g')) {
    if (getComputedStyle(g).display === 'none') continue;
    const rect = g.querySelector('rect').getBoundingClientRect();
    const title = g.querySelector('title');
    const text = g.querySelector('text');
    out.push({label: text.textContent, title: title ? title.textContent : '',
              d: +g.getAttributeNS('urn:pyperf:flamegraph', 'd'), tw: text.getComputedTextLength(),
              x: rect.x, y: rect.y, w: rect.width, h: rect.height,
              fill: g.querySelector('rect').getAttribute('fill')});
  }
  return out;
})()
"""

ELEMENT_TEXT = r"""
(() => {
  const out = {};
  for (const id of ['title', 'details', 'matched', 'unzoom', 'search', 'levels', 'subtitle']) {
    const e = document.getElementById(id);
    out[id] = e ? {text: e.textContent, shown: getComputedStyle(e).display !== 'none',
                   box: (() => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()} : null;
  }
  out.root = document.documentElement.localName;
  out.parsererror = document.getElementsByTagName('parsererror').length;
  out.svg_height = document.documentElement.getBoundingClientRect().height;
  return out;
})()
"""


def flamegraph(chromium, svg, screenshot, click_prefix, term):
    b = Browser(chromium)
    try:
        b.open_page()
        b.navigate("file://" + os.path.abspath(svg))
        time.sleep(0.3)
        report = {"initial": {"frames": b.eval(SHOWN_FRAMES), "elements": b.eval(ELEMENT_TEXT)}}
        b.screenshot(screenshot)

        frames = [f for f in report["initial"]["frames"] if f["title"].startswith(click_prefix)]
        if not frames:
            report["error"] = "no shown frame starts with %r" % click_prefix
            return report
        # The widest; of equal ones (a recursion) the top one on the screen.
        target = max(frames, key=lambda f: (f["w"], -f["y"]))
        report["clicked"] = target
        b.click(target["x"] + min(target["w"] / 2, 40), target["y"] + target["h"] / 2)
        time.sleep(0.2)
        report["zoomed"] = {"frames": b.eval(SHOWN_FRAMES), "elements": b.eval(ELEMENT_TEXT)}
        b.screenshot(screenshot.replace(".png", "-zoomed.png"))

        box = report["zoomed"]["elements"]["unzoom"]["box"]
        b.click(box[0] + box[2] / 2, box[1] + box[3] / 2)
        time.sleep(0.2)
        report["reset"] = {"frames": b.eval(SHOWN_FRAMES), "elements": b.eval(ELEMENT_TEXT)}

        # Ctrl-F opens the search prompt; type the term into it.
        # The key event is answered only once the prompt it opens is closed.
        key = b.send(
            "Input.dispatchKeyEvent",
            {"type": "rawKeyDown", "modifiers": 2, "key": "f", "code": "KeyF", "windowsVirtualKeyCode": 70},
        )
        dialog = b.wait_event("Page.javascriptDialogOpening", timeout=10)
        report["dialog"] = dialog["params"].get("type")
        b.call("Page.handleJavaScriptDialog", {"accept": True, "promptText": term})
        b.reply(key)
        b.call("Input.dispatchKeyEvent", {"type": "keyUp", "modifiers": 2, "key": "f", "code": "KeyF"})
        time.sleep(0.2)
        report["searched"] = {"frames": b.eval(SHOWN_FRAMES), "elements": b.eval(ELEMENT_TEXT)}
        b.screenshot(screenshot.replace(".png", "-search.png"))
        return report
    finally:
        b.close()


SPEEDSCOPE_STATE = r"""
(() => ({title: document.title, text: document.body ? document.body.innerText : '',
         canvases: document.querySelectorAll('canvas').length}))()
"""


def speedscope(chromium, index, profile, screenshot):
    with open(profile, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    fd, loader = tempfile.mkstemp(prefix="pyperf-speedscope-", suffix=".js")
    with os.fdopen(fd, "w") as f:
        # What the speedscope command writes (bin/cli.mjs).
        f.write("speedscope.loadFileFromBase64(%s, %s)" % (json.dumps(os.path.basename(profile)), json.dumps(data)))
    b = Browser(chromium)
    b.dismiss_dialogs = True
    try:
        b.open_page()
        b.navigate("file://" + os.path.abspath(index) + "#localProfilePath=" + loader)
        report = {}
        deadline = time.time() + 30
        # speedscope names the page after the profile once it has loaded it.
        while b.eval(SPEEDSCOPE_STATE)["title"].strip().lower() == "speedscope" and time.time() < deadline:
            time.sleep(0.25)
        # Then draws the flame chart and its toolbar: waited for (a loaded machine takes its time), at most 30 s.
        menu_box = r"""
(() => {
  const hits = [...document.querySelectorAll('body *')].filter(e => /\(1\/\d+\)/.test(e.textContent));
  if (!hits.length) return null;
  const r = hits[hits.length - 1].getBoundingClientRect();
  return [r.x, r.y, r.width, r.height];
})()
"""
        deadline = time.time() + 30
        while time.time() < deadline and not (b.eval(SPEEDSCOPE_STATE)["canvases"] and b.eval(menu_box)):
            time.sleep(0.25)
        time.sleep(0.5)
        report["loaded"] = b.eval(SPEEDSCOPE_STATE)
        b.screenshot(screenshot)
        # The profile menu (the name in the middle of the toolbar) lists every profile: one per thread. Opened
        # with a real click.
        box = b.eval(menu_box)
        report["menu"] = {"opened": box is not None, "text": ""}
        if box:
            before = b.eval("document.body.innerText")
            b.click(box[0] + box[2] / 2, box[1] + box[3] / 2)
            # Until the menu shows (the page's text changes), at most 10 s.
            deadline = time.time() + 10
            while b.eval("document.body.innerText") == before and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(0.2)
            report["menu"]["text"] = b.eval("document.body.innerText")
        b.screenshot(screenshot.replace(".png", "-menu.png"))
        report["dialogs"] = b.dialogs
        report["exceptions"] = [
            e["params"]["exceptionDetails"].get("text", "") + " " +
            str(e["params"]["exceptionDetails"].get("exception", {}).get("description", ""))
            for e in b.events
            if e["method"] == "Runtime.exceptionThrown"
        ]
        return report
    finally:
        b.close()
        os.unlink(loader)


def main():
    chromium, mode = sys.argv[1], sys.argv[2]
    if mode == "flamegraph":
        report = flamegraph(chromium, *sys.argv[3:7])
    elif mode == "speedscope":
        report = speedscope(chromium, *sys.argv[3:6])
    else:
        sys.exit("unknown mode " + mode)
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
