"""Draws one trace's received spans as a waterfall (the picture a tracing UI shows: one row per
span, indented under its parent, a bar from its start to its end, its events as ticks) and
photographs it with headless Chromium. There is no Jaeger image to run here (no Docker engine),
so the picture in docs/traces.md is drawn from the spans that the OTLP receiver decoded.

    from trace_picture import screenshot
    screenshot(spans, trace_id, "docs/screenshots/trace.png")
"""
import html
import os
import shutil
import tempfile

COLORS = {"server": "#4e79a7", "internal": "#59a14f", "client": "#e15759", "consumer": "#f28e2b",
          "producer": "#b07aa1"}
SHOWN = ["taskserver.job.id", "taskserver.task.attempt", "taskserver.concurrency.key", "taskserver.worker.id",
         "http.request.method", "http.route", "http.response.status_code", "server.address", "error.type",
         "taskserver.webhook.event", "taskserver.job.queue_ms"]


def ordered(spans):
    """Depth-first, children by start time; each with its depth."""
    ids = {s["spanId"] for s in spans}
    children = {}
    for span in spans:
        parent = span["parentSpanId"] if span["parentSpanId"] in ids else None
        children.setdefault(parent, []).append(span)
    out = []

    def walk(parent, depth):
        for span in sorted(children.get(parent, []), key=lambda s: s["start"]):
            out.append((span, depth))
            walk(span["spanId"], depth + 1)
    walk(None, 0)
    return out


def label_position(left, width):
    """After the bar, or before it when the bar reaches the right edge."""
    if left + width <= 88:
        return f"left:{left + width:.3f}%"
    return f"right:{100 - left:.3f}%;padding-right:6px"


def page(spans, trace_id):
    rows = ordered(spans)
    start = min(s["start"] for s in spans)
    end = max(s["end"] for s in spans)
    total = max(1, end - start)
    lines = []
    for span, depth in rows:
        left = 100.0 * (span["start"] - start) / total
        width = max(0.3, 100.0 * (span["end"] - span["start"]) / total)
        color = COLORS.get(span["kind"], "#999")
        if span["status"].get("code") == 2:
            color = "#d62728"
        ticks = "".join(
            f'<span class="tick" style="left:{100.0 * (e["time"] - start) / total:.3f}%" '
            f'title="{html.escape(e["name"])}"></span>' for e in span["events"])
        attributes = " · ".join(f"{k.split('.')[-1]}={html.escape(str(span['attributes'][k]))}"
                                for k in SHOWN if k in span["attributes"])
        waits = [e for e in span["events"] if e["name"] == "taskserver.wait"]
        if waits:
            attributes += " · " + ", ".join(
                f"waited {w['attributes'].get('taskserver.wait.ms')} ms for {w['attributes'].get('taskserver.wait.reason')}"
                for w in waits)
        lines.append(
            f'<div class="row"><div class="name" style="padding-left:{8 + depth * 18}px">'
            f'<b>{html.escape(span["name"])}</b> <i>{span["kind"]}</i><br><small>{attributes}</small></div>'
            f'<div class="lane"><span class="bar" style="left:{left:.3f}%;width:{width:.3f}%;background:{color}"></span>'
            f'{ticks}<span class="ms" style="{label_position(left, width)}">'
            f'{(span["end"] - span["start"]) / 1e6:.1f} ms</span></div></div>')
    service = spans[0]["resource"].get("service.name", "")
    return f"""<!doctype html><meta charset="utf-8"><title>trace {trace_id}</title>
<style>
body {{ font: 13px -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 0; color: #222; }}
header {{ background: #24292f; color: #fff; padding: 10px 14px; }}
header small {{ color: #bbb; }}
.row {{ display: flex; border-bottom: 1px solid #eee; min-height: 38px; }}
.name {{ width: 560px; flex: none; padding: 4px 8px; border-right: 1px solid #ddd; overflow: hidden; }}
.name i {{ color: #888; font-style: normal; font-size: 11px; }}
.name small {{ color: #666; }}
.lane {{ position: relative; flex: auto; margin: 0 60px 0 10px; }}
.bar {{ position: absolute; top: 11px; height: 14px; border-radius: 2px; }}
.tick {{ position: absolute; top: 8px; width: 2px; height: 20px; background: #222; }}
.ms {{ position: absolute; top: 11px; padding-left: 6px; font-size: 11px; color: #444; white-space: nowrap; }}
</style>
<header><b>{html.escape(service)}</b> — trace {trace_id} — {len(spans)} spans, {total / 1e6:.1f} ms
<small>(drawn from the OTLP the server exported; ticks are span events)</small></header>
{''.join(lines)}
"""


def screenshot(spans, trace_id, path):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    mine = [s for s in spans if s["traceId"] == trace_id]
    directory = tempfile.mkdtemp(prefix="trace-picture-")
    page_path = os.path.join(directory, "trace.html")
    with open(page_path, "w") as handle:
        handle.write(page(mine, trace_id))
    opts = Options()
    height = 48 + 40 * len(mine)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size=1400,{height}",
                "--disable-gpu", "--no-first-run", "--disable-extensions", "--lang=en-US"):
        opts.add_argument(arg)
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if binary:
        opts.binary_location = binary
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=opts)
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1400, "height": height, "deviceScaleFactor": 1, "mobile": False})
        driver.get("file://" + page_path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        driver.save_screenshot(path)
    finally:
        driver.quit()
    shutil.rmtree(directory, ignore_errors=True)
    return path
