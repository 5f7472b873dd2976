"""run.html in a real browser engine: Debian's headless Chromium driven by Playwright.

Playwright, not Selenium: it drives a Chromium it did not download (``executable_path``)
through the DevTools protocol with no separate driver binary (Selenium needs a
chromedriver of the browser's exact version, which Debian packages apart), and it
sees every request and console message of a page, which the no-network test needs.

One browser per module (a module-scoped fixture); each test opens its own page.

- the demo run (README's ``opdebug demo``): the verdict and the bfloat16 finding; the
  dtype x mode grid with the failing cell coloured as failing and the failing-only
  value marked; the table filtered by status, axis value and text; a case opened with
  its inputs and its error map actually loaded; from file:// no request to any
  address and no console error;
- a run with a crash group, an unsupported case, several causes and a refuted lead
  (recorded results, no torch): each rendered, and an error message with markup in it
  shown as text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_MODULE, REPO_ROOT

CHROMIUM = "/usr/bin/chromium"
REQUIRE_ENV = "OPDEBUG_REQUIRE_CHROMIUM"  # scripts/test.sh sets it: a missing browser then fails, not skips
MISMATCH_RGB = "rgb(198, 40, 40)"  # --st-numerical_mismatch, #c62828 (the pictures' colour)
PASSED_RGB = "rgb(46, 125, 50)"  # --st-passed, #2e7d32


def _missing() -> str | None:
    if not Path(CHROMIUM).is_file():
        return f"{CHROMIUM} is missing (apt-get install chromium; scripts/test.sh does)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is missing (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser() -> Any:
    why = _missing()
    if why:
        if os.environ.get(REQUIRE_ENV) or os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


class Opened:
    """A page of the browser with every request and every console error it made."""

    def __init__(self, browser: Any, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready]")

    def rows(self) -> list[str]:
        return self.page.eval_on_selector_all("tr.case-row", "rows => rows.map(r => r.dataset.case)")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's demo, as a person runs it (``opdebug demo``): 5 cases, bfloat16 fails, pictures drawn."""
    root = tmp_path_factory.mktemp("page-demo")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OPDEBUG_RUNNER_STAGE=str(root / "stage"))
    env.pop("OPDEBUG_INVENTORY", None)
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "demo", "--root", str(root / "runs"), "--json"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return Path(json.loads(proc.stdout)["run_dir"])


def test_the_demo_page_shows_the_verdict_and_the_bfloat16_finding(browser: Any, demo_run: Path) -> None:
    opened = Opened(browser, (demo_run / "run.html").as_uri())
    page = opened.page
    assert page.text_content("#verdict") == "diagnosed"
    finding = page.locator('.finding[data-predicate="dtype == bfloat16"]')
    assert finding.is_visible()
    assert "minimal pair" in finding.text_content() and "rms.dtype-bfloat16" in finding.text_content()
    assert page.locator("#counts [data-status=numerical_mismatch]").text_content() == "numerical_mismatch 1"
    assert "rmsnorm_demo.rms_norm_reference" in page.text_content("#facts")
    assert "bfloat16: atol 0.008, rtol 0.008" in page.text_content("#facts")
    assert [a.get_attribute("href") for a in page.locator("#links a").all()][:2] == ["report.md", "reproduction.md"]


def test_the_dtype_by_mode_grid_colours_the_failing_cell_as_failing(browser: Any, demo_run: Path) -> None:
    page = Opened(browser, (demo_run / "run.html").as_uri()).page
    page.select_option("#grid-rows", label="dtype")
    page.select_option("#grid-cols", label="mode")
    cell = page.locator('table.grid td[data-row="bfloat16"][data-col="eager"]')
    assert cell.get_attribute("data-status") == "numerical_mismatch"
    assert cell.evaluate("td => getComputedStyle(td).backgroundColor") == MISMATCH_RGB
    passing = page.locator('table.grid td[data-row="float32"][data-col="eager"]')
    assert passing.get_attribute("data-status") == "passed" and passing.text_content().startswith("2")
    assert passing.evaluate("td => getComputedStyle(td).backgroundColor") == PASSED_RGB
    # bfloat16 only failing cases have; float16 and eager are had by passing cases too
    marked = page.eval_on_selector_all("table.grid th.only-failing", "ths => ths.map(t => t.textContent)")
    assert marked == ["bfloat16"]
    # another pair of axes: x.strides by mode
    page.select_option("#grid-rows", label="x.strides")
    assert page.locator("table.grid").get_attribute("data-rows") == "x.strides"


def test_filters_leave_exactly_the_cases_asked_for(browser: Any, demo_run: Path) -> None:
    opened = Opened(browser, (demo_run / "run.html").as_uri())
    page = opened.page
    analysis = json.loads((demo_run / "analysis.json").read_text())
    failing = sorted(f["case_id"] for f in analysis["failures"] if f["status"] == "numerical_mismatch")
    assert len(opened.rows()) == 5 and failing == ["rms.dtype-bfloat16"]
    page.select_option("#filter-status", "numerical_mismatch")
    assert sorted(opened.rows()) == failing
    page.select_option("#filter-status", "")
    page.select_option("#filter-axis", label="mode")
    page.select_option("#filter-value", "compile")
    assert opened.rows() == ["rms.mode-compile"]
    page.select_option("#filter-axis", "")
    page.fill("#filter-text", "strides-1")
    assert opened.rows() == ["rms.x.strides-1-8"]
    page.fill("#filter-text", "")
    page.click('table.cases th[data-key="id"]')  # sorted by id already: now descending
    assert opened.rows() == sorted(opened.rows(), reverse=True)
    page.click('table.grid td[data-row="bfloat16"][data-col="eager"]')  # a grid cell filters the table to it
    assert opened.rows() == ["rms.dtype-bfloat16"]


def test_an_opened_case_shows_its_call_and_its_error_map_loaded(browser: Any, demo_run: Path) -> None:
    page = Opened(browser, (demo_run / "run.html").as_uri()).page
    page.click('tr.case-row[data-case="rms.dtype-bfloat16"]')
    detail = page.locator('tr.case-detail[data-case="rms.dtype-bfloat16"]')
    inputs = detail.locator("tr.input").all_text_contents()
    assert len(inputs) == 2 and inputs[0].startswith("x[8,4096]contiguous0bfloat16ND")
    assert inputs[0].endswith("normal") and inputs[1].endswith("uniform(low=0.5, high=1.5)")
    assert "max_abs" in detail.text_content() and "tolerance judge" in detail.text_content()
    image = detail.locator('img[alt="rms.dtype-bfloat16.out.error-map.png"]')
    image.wait_for()
    assert image.evaluate("img => img.decode().then(() => img.naturalWidth)") > 0
    assert "opdebug repro" in detail.text_content()
    page.click('tr.case-row[data-case="rms.dtype-bfloat16"]')  # closes it again
    assert page.locator("tr.case-detail").count() == 0


def test_from_file_no_request_leaves_the_page_and_no_console_error(browser: Any, demo_run: Path) -> None:
    url = (demo_run / "run.html").as_uri()
    opened = Opened(browser, url)
    page = opened.page
    page.click('tr.case-row[data-case="rms.dtype-bfloat16"]')
    page.locator("tr.case-detail img").first.evaluate("img => img.decode()")
    page.select_option("#grid-cols", label="x.strides")
    page.click("#pictures img")
    assert opened.requests == [url]  # the page itself; pictures are data: URIs (no request)
    assert opened.errors == []
    html = (demo_run / "run.html").read_text()
    assert "http://" not in html and "https://" not in html and "src=\"/" not in html


# -- a run with every kind of account -------------------------------------------------------

X = {"name": "x", "shape": [16, 256], "dtype": "float32"}
MARKUP = "EZ9999: Inner Error </script><b id=injected>x</b>"


def _result(cid: str, status: str) -> dict[str, Any]:
    passed = status == "passed"
    doc: dict[str, Any] = {"case_id": cid, "status": status, "comparisons": [{
        "output": "out", "passed": passed, "numel": 4096, "atol": 1e-3, "rtol": 1e-3, "max_abs": 0.0 if passed else 0.5,
        "mismatch_count": 0 if passed else 99, "mismatch_ratio": 0.0 if passed else 0.02}]}
    if status == "crash":
        doc["comparisons"] = []
        doc["error"] = {"type": "RuntimeError", "message": MARKUP, "signature": "RuntimeError: EZ9999",
                        "traceback_tail": "Traceback (most recent call last):\nRuntimeError: EZ9999"}
    if status == "unsupported":
        doc["comparisons"] = []
        doc["error"] = {"type": "RuntimeError", "message": "graph mode is not supported on this device",
                        "signature": "RuntimeError: not supported", "matched_rule": "not supported"}
    return doc


def _status(cid: str) -> str:
    if "strides" in cid:
        return "crash"
    if "graph" in cid:
        return "unsupported"
    return "numerical_mismatch" if "bfloat16" in cid or "x.shape-16x1024" in cid or "2048" in cid else "passed"


def make_rich_run(root: Path) -> Path:
    """Two separate mismatch causes (bfloat16; rows longer than 256), a crash group whose first lead
    (x.contiguity == transposed) a later passing case t2 refutes, and an unsupported graph case."""
    from tools.analyze_failures import analyze_failures
    from tools.plan_cases import plan_cases
    from tools.record_result import record_result

    request = {
        "config": {"run_id": "rich", "operator": {"name": "scaled_add", "candidate": "scaled_add_mod.cand",
                                                  "reference": "scaled_add_mod.ref", "modules": ["scaled_add_mod.py"]},
                   "tolerance": {"atol": 1e-3, "rtol": 1e-3}},
        "module_sources": {"scaled_add_mod.py": DEMO_MODULE},
        "stars": [{"base": {"id": "b", "seed": 1, "inputs": [X]},
                   "vary": [{"axis": "dtype", "values": ["float16", "bfloat16"]},
                            {"axis": "shape", "input": "x", "values": [[16, 64], [16, 1024], [16, 2048], [4, 256]]},
                            {"axis": "strides", "input": "x", "values": [[1, 16]]},
                            {"axis": "mode", "values": ["graph"]}]}]}
    plan = plan_cases(request, root=root)
    for case in plan.cases:
        record_result("rich", _result(case.id, _status(case.id)), root=root)
    analyze_failures("rich", root=root)
    later = {"id": "t2", "seed": 2, "inputs": [dict(X, dtype="float16", strides=[1, 16])]}
    plan_cases({"run_id": "rich", "append": True, "cases": [later]}, root=root)
    record_result("rich", _result("t2", "passed"), root=root)
    analyze_failures("rich", root=root)
    return root / "rich"


@pytest.fixture(scope="module")
def rich_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_rich_run(tmp_path_factory.mktemp("page-rich"))


def test_a_crash_group_an_unsupported_case_several_causes_and_a_refuted_lead_render(
    browser: Any, rich_run: Path
) -> None:
    analysis = json.loads((rich_run / "analysis.json").read_text())
    assert analysis["causes"] == 2 and analysis["refuted"] and analysis["crash_groups"] and analysis["unsupported"]
    opened = Opened(browser, (rich_run / "run.html").as_uri())
    page = opened.page
    labels = page.eval_on_selector_all(".finding .label", "ls => ls.map(l => l.textContent)")
    assert {"cause 1: ", "cause 2: ", "crash: "} <= set(labels)
    assert page.locator('.finding[data-predicate="dtype == bfloat16"]').is_visible()
    assert "2 separate causes" in page.text_content(".account.causes")
    crash = page.text_content(".account.crash-groups")
    assert "RuntimeError: EZ9999" in crash and "b.x.strides-1-16" in crash
    assert "b.mode-graph" in page.text_content(".account.unsupported")
    refuted = page.text_content(".account.refuted")
    assert "x.contiguity == transposed" in refuted and "t2" in refuted
    assert "refuted lead: x.contiguity == transposed" in page.text_content(".account.lines")
    # a case link opens the case; the crash's message is text, never markup
    page.locator(".account.crash-groups a.case-link").first.click()
    detail = page.locator('tr.case-detail[data-case="b.x.strides-1-16"]')
    assert MARKUP in detail.locator("pre.message").text_content()
    assert "RuntimeError: EZ9999" in detail.text_content()
    assert page.locator("#injected").count() == 0
    page.select_option("#filter-status", "unsupported")
    assert opened.rows() == ["b.mode-graph"]
    assert opened.errors == []


def test_the_embedded_run_data_cannot_end_its_script_element(rich_run: Path) -> None:
    html = (rich_run / "run.html").read_text()
    start = html.index('<script type="application/json" id="run-data">')
    embedded = html[start:html.index("</script>", start)]
    assert "<b id=injected>" not in html and "\\u003c/script\\u003e\\u003cb id=injected\\u003e" in embedded
    data = json.loads(embedded.split(">", 1)[1])
    assert data["details"]["b.x.strides-1-16"]["error"]["message"] == MARKUP



# -- the MCP App: tools/list, resources/read over stdio, and a minimal host in the browser -----

APP_URI = "ui://opdebug/run-page"
APP_MIME = "text/html;profile=mcp-app"

# The host side of the MCP Apps extension (specification 2026-01-26), as small as it can be: the view in a
# sandboxed iframe; ui/initialize answered with the host's capabilities; after ui/notifications/initialized
# the tool's input and result; resources/read answered from what the real server returned over stdio.
HOST_JS = """
([app, input, result, resources, capabilities]) => new Promise((ready) => {
  window.hostLog = [];
  const frame = document.createElement("iframe");
  frame.setAttribute("sandbox", "allow-scripts");
  frame.style.width = "1200px"; frame.style.height = "2000px";
  const send = (m) => frame.contentWindow.postMessage(Object.assign({jsonrpc: "2.0"}, m), "*");
  window.addEventListener("message", (event) => {
    if (event.source !== frame.contentWindow) return;
    const m = event.data;
    window.hostLog.push(m);
    if (m.method === "ui/initialize") {
      send({id: m.id, result: {protocolVersion: "2026-01-26", hostCapabilities: capabilities,
                               hostInfo: {name: "test-host", version: "1"},
                               hostContext: {theme: "light", displayMode: "inline"}}});
    } else if (m.method === "ui/notifications/initialized") {
      send({method: "ui/notifications/tool-input", params: {arguments: input}});
      send({method: "ui/notifications/tool-result", params: result});
      ready(true);
    } else if (m.method === "resources/read") {
      const contents = resources[m.params.uri];
      send(contents ? {id: m.id, result: {contents: contents}}
                    : {id: m.id, error: {code: -32002, message: "no resource " + m.params.uri}});
    }
  });
  frame.srcdoc = app;
  document.body.appendChild(frame);
})
"""


def _over_stdio(root: Path, scenario: Any) -> Any:
    """The real MCP client over stdio, in a thread of its own (the browser's sync API holds this one's loop)."""
    from concurrent.futures import ThreadPoolExecutor

    from test_mcp_stdio import with_server

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(with_server, root, scenario).result()


@pytest.fixture(scope="module")
def served(rich_run: Path) -> dict[str, Any]:
    """What a host gets from the server for the rich run: tools/list, the app, an answer and the run's page."""

    async def scenario(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"tools": (await client.list_tools()).tools}
        out["listed"] = (await client.list_resources()).resources
        out["app"] = (await client.read_resource(APP_URI)).contents[0]
        answer = await client.call_tool("analyze_failures", {"run_id": "rich"})
        out["answer"] = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        out["page"] = (await client.read_resource("opdebug://runs/rich/page")).contents[0]
        return out

    return _over_stdio(rich_run.parent, scenario)


def test_tools_list_links_the_app_and_resources_read_returns_it_with_its_mime_type(
    served: dict, rich_run: Path
) -> None:
    linked = {t.name: t.meta for t in served["tools"] if t.meta}
    assert linked == {"analyze_failures": {"ui": {"resourceUri": APP_URI}},
                      "narrow_failure": {"ui": {"resourceUri": APP_URI}}}
    assert [r.mime_type for r in served["listed"] if str(r.uri) == APP_URI] == [APP_MIME]
    app = served["app"]
    assert str(app.uri) == APP_URI and app.mime_type == APP_MIME and app.meta == {"ui": {"prefersBorder": True}}
    assert app.text.startswith("<!DOCTYPE html>") and '<script type="application/json" id="run-data">null<' in app.text
    assert "http://" not in app.text and "https://" not in app.text  # nothing to fetch: no CSP domain to declare
    page = served["page"]
    assert page.mime_type == "text/html" and page.text == (rich_run / "run.html").read_text()
    # the answer itself is today's: text beside the structured analysis, nothing of the view in it
    answer = served["answer"]
    assert answer["structuredContent"]["verdict"] == "diagnosed" and answer["content"][0]["type"] == "text"
    assert "ui" not in answer.get("_meta", {}) and "ui://" not in json.dumps(answer)


def _host(browser: Any, served: dict, capabilities: dict) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_content("<!DOCTYPE html><html><body></body></html>")
    resources = {"opdebug://runs/rich/page": [{"uri": "opdebug://runs/rich/page", "mimeType": "text/html",
                                               "text": served["page"].text}]}
    answer = served["answer"]
    assert page.evaluate(HOST_JS, [served["app"].text, {"run_id": "rich"}, answer, resources, capabilities])
    return page, errors


def test_a_minimal_host_hands_the_app_a_tool_result_and_the_view_renders_that_run(
    browser: Any, served: dict
) -> None:
    page, errors = _host(browser, served, {"serverResources": {}})
    view = page.frame_locator("iframe")
    view.locator("body[data-ready] table.grid td.cell").first.wait_for()
    assert view.locator("#verdict").text_content() == "diagnosed"
    assert view.locator('.finding[data-predicate="dtype == bfloat16"]').is_visible()
    assert view.locator("tr.case-row").count() == 10  # the whole run, read through the host
    assert "RuntimeError: EZ9999" in view.locator(".account.crash-groups").text_content()
    log = page.evaluate("window.hostLog")
    methods = [m.get("method") for m in log]
    assert methods[:2] == ["ui/initialize", "ui/notifications/initialized"]
    assert log[0]["params"]["protocolVersion"] == "2026-01-26" and "appInfo" in log[0]["params"]
    reads = [m["params"]["uri"] for m in log if m.get("method") == "resources/read"]
    assert reads == ["opdebug://runs/rich/page"]
    assert errors == []


def test_a_host_that_cannot_read_resources_gets_the_view_of_the_answer_alone(browser: Any, served: dict) -> None:
    page, errors = _host(browser, served, {})
    view = page.frame_locator("iframe")
    view.locator("body[data-ready]").wait_for()
    assert view.locator("#verdict").text_content() == "diagnosed"
    assert view.locator('.finding[data-predicate="dtype == bfloat16"]').is_visible()
    analysis = served["answer"]["structuredContent"]
    failing = sorted(f["case_id"] for f in analysis["failures"] + analysis["unsupported"])
    assert sorted(view.locator("tr.case-row").evaluate_all("rs => rs.map(r => r.dataset.case)")) == failing
    assert not [m for m in page.evaluate("window.hostLog") if m.get("method") == "resources/read"]
    assert errors == []


def test_a_large_run_draws_its_table_a_page_at_a_time(browser: Any, tmp_path: Path) -> None:
    """250 cases: 100 rows drawn at once; next/previous move by pages; a filter starts again at page 1;
    a case link opens a case that is on another page."""
    from tools.analyze_failures import analyze_failures
    from tools.plan_cases import plan_cases
    from tools.record_result import record_result

    n = 250
    cases = [{"id": f"c{i:03d}", "seed": i, "inputs": [dict(X, shape=[4, 8 * (1 + i % 50)])]} for i in range(n)]
    plan_cases({"config": {"run_id": "large", "operator": {"name": "op", "candidate": "m.cand", "reference": "m.ref"}},
                "cases": cases}, root=tmp_path)
    for c in cases:
        record_result("large", _result(c["id"], "numerical_mismatch" if c["inputs"][0]["shape"][1] > 100 else "passed"),
                      root=tmp_path)
    analyze_failures("large", root=tmp_path)
    opened = Opened(browser, (tmp_path / "large" / "run.html").as_uri())
    page = opened.page
    assert opened.rows() == [f"c{i:03d}" for i in range(100)]
    assert page.text_content("#page-no") == "page 1 of 3"
    page.click("#next")
    page.click("#next")
    assert opened.rows() == [f"c{i:03d}" for i in range(200, 250)] and page.is_disabled("#next")
    page.select_option("#filter-status", "numerical_mismatch")
    assert page.text_content("#page-no") == "page 1 of 2" and len(opened.rows()) == 100
    page.select_option("#filter-status", "")
    page.locator('.finding a.case-link').last.click()  # a covered case: its page is opened with it
    shown = page.locator("tr.case-detail").get_attribute("data-case")
    assert shown in opened.rows() and page.locator("tr.case-detail").is_visible()
    assert opened.errors == []


def run_data(run: Path) -> dict[str, Any]:
    html = (run / "run.html").read_text()
    start = html.index('id="run-data">') + len('id="run-data">')
    return json.loads(html[start:html.index("</script>", start)])


def test_a_verify_run_writes_the_page_again_with_its_cases_and_conclusion(demo_run: Path, tmp_path: Path) -> None:
    import asyncio
    import shutil

    from tools.artifacts.verify import verify_run
    from tools.remote.pool import REGISTRY

    copy = tmp_path / demo_run.name  # the demo's run, verified apart (the other tests read the original)
    shutil.copytree(demo_run, copy)
    before = run_data(copy)
    assert before["header"]["verify"] is None and len(before["cases"]) == 5

    async def verify() -> Any:
        try:
            return await verify_run(copy.name, root=tmp_path, run_command=False)
        finally:
            await REGISTRY.close_all()

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:  # a loop of its own: the browser's sync API holds this thread's
        response = pool.submit(asyncio.run, verify()).result()
    after = run_data(copy)
    assert response.still_failing == ["rms.dtype-bfloat16"]  # the planted bug is still there
    assert after["header"]["verify"].startswith("After the fix (verify 1): still failing in isolation")
    rows = {c["id"]: c["status"] for c in after["cases"]}
    assert rows["rms.dtype-bfloat16.verify-1"] == "numerical_mismatch" and len(rows) == 6
    assert after["header"]["analyzed_at"] == before["header"]["analyzed_at"]  # the page, not a new analysis
