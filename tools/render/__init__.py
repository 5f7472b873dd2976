"""Rendering apart from doing: what a person or an agent reads, made from the
models and files a run already has; nothing here runs a case or writes
evidence.

- ``markdown``: cells, fenced blocks, tables;
- ``report``: report.md and reproduction.md from an analysis;
- ``sections``: the report's artefact sections (verification after a fix, pictures);
- ``describe``: the one describer of a comparison (report, CLI, tool answers);
- ``summary``: each tool's text answer beside its structured content;
- ``page``: the data of run.html (and of the MCP App view), gathered from the analysis and the run;
- ``page_html``: run.html from that data, a Jinja2 template with page_assets/ (CSS, JavaScript) inlined.
"""
