"""Rendering apart from doing: what a person or an agent reads, made from the
models and files a run already has; nothing here runs a case or writes
evidence.

- ``markdown``: cells, fenced blocks, tables;
- ``report``: report.md and reproduction.md from an analysis;
- ``sections``: the report's artefact sections (verification after a fix, pictures);
- ``describe``: the one describer of a comparison (report, CLI, tool answers);
- ``summary``: each tool's text answer beside its structured content.
"""
