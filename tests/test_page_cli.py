"""``opdebug report RUN --html`` and ``opdebug open RUN`` in subprocesses, as test_cli.py runs the CLI:
the page written and its path printed; opened with the person's browser ($BROWSER, which Python's
webbrowser honours: here a recorder of what it was asked to open), and where there is no browser,
the page's path said instead; a run never analyzed refused in one line (exit 2)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_cli import ok, opdebug, user_error
from test_page import make_rich_run


@pytest.fixture
def analyzed(evidence_root: Path) -> Path:
    return make_rich_run(evidence_root)


def test_report_html_writes_the_page_and_prints_its_path(analyzed: Path, subprocess_env: dict, tmp_path: Path) -> None:
    page = analyzed / "run.html"
    page.unlink()
    out = ok(opdebug("report", str(analyzed), "--html", env=subprocess_env, cwd=tmp_path))
    assert out.strip() == str(page) and page.is_file()
    assert '"run_id":"rich"' in page.read_text() and "<title>scaled_add (run rich)</title>" in page.read_text()
    # by run id under --root, and --json
    out = ok(opdebug("report", "rich", "--root", str(analyzed.parent), "--html", "--json", env=subprocess_env,
                     cwd=tmp_path))
    assert json.loads(out) == {"run_id": "rich", "path": str(page)}
    # without --html: report.md's path
    assert ok(opdebug("report", str(analyzed), env=subprocess_env, cwd=tmp_path)).strip() == str(analyzed / "report.md")


def test_report_html_of_a_run_never_analyzed_is_refused(evidence_root: Path, subprocess_env: dict,
                                                        tmp_path: Path) -> None:
    from conftest import minimal_plan_request

    from tools.plan_cases import plan_cases

    plan_cases(minimal_plan_request("fresh", ("a",)), root=evidence_root)
    err = user_error(opdebug("report", str(evidence_root / "fresh"), "--html", env=subprocess_env, cwd=tmp_path))
    assert "[not_analyzed]" in err and "analyze it first" in err and not (evidence_root / "fresh" / "run.html").exists()
    err = user_error(opdebug("open", "nope", "--root", str(evidence_root), env=subprocess_env, cwd=tmp_path))
    assert "[unknown_run]" in err


def test_open_uses_the_persons_browser(analyzed: Path, subprocess_env: dict, tmp_path: Path) -> None:
    opened = tmp_path / "opened.txt"
    recorder = tmp_path / "browser.py"
    recorder.write_text(f"import sys\nopen({str(opened)!r}, 'w').write(sys.argv[1])\n")
    env = dict(subprocess_env, BROWSER=f"{sys.executable} {recorder} %s")
    out = ok(opdebug("open", str(analyzed), env=env, cwd=tmp_path))
    assert out.strip() == f"opened {analyzed / 'run.html'} in the browser"
    assert opened.read_text() == (analyzed / "run.html").as_uri()


def test_open_says_where_the_page_is_where_no_browser_is(analyzed: Path, subprocess_env: dict, tmp_path: Path) -> None:
    # no display, no $BROWSER, no terminal and nothing on PATH: Python's webbrowser finds no browser
    env = {k: v for k, v in subprocess_env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "TERM")}
    env["PATH"] = str(tmp_path / "empty")
    (analyzed / "run.html").unlink()  # written on the way
    out = ok(opdebug("open", str(analyzed), "--json", env=env, cwd=tmp_path))
    assert json.loads(out) == {"run_id": "rich", "path": str(analyzed / "run.html"), "opened": False}
    out = ok(opdebug("open", str(analyzed), env=env, cwd=tmp_path))
    assert "no browser here" in out and (analyzed / "run.html").as_uri() in out


def test_the_page_links_the_exported_reproducer_and_regression_test(analyzed: Path, subprocess_env: dict,
                                                                    tmp_path: Path) -> None:
    from tools.artifacts.regression import export_regression
    from tools.artifacts.repro import export_repro

    export_repro("rich", "b.dtype-bfloat16", analyzed / "artifacts" / "repro", root=analyzed.parent)
    export_regression("rich", str(analyzed / "artifacts" / "regression"), root=analyzed.parent)
    ok(opdebug("report", str(analyzed), "--html", env=subprocess_env, cwd=tmp_path))
    html = (analyzed / "run.html").read_text()
    start = html.index('id="run-data">') + len('id="run-data">')
    data = json.loads(html[start:html.index("</script>", start)])
    hrefs = [link["href"] for link in data["links"]]
    assert hrefs == ["report.md", "reproduction.md", "analysis.json", "artifacts/repro/b.dtype-bfloat16.py",
                     "artifacts/regression/test_scaled_add_regression.py"]  # not the user module beside them
    assert all((analyzed / h).is_file() for h in hrefs)
    assert data["details"]["b.dtype-bfloat16"]["repro"] == "artifacts/repro/b.dtype-bfloat16.py"
    assert data["details"]["b"]["repro"] is None and "opdebug repro rich b --out DIR" in html
