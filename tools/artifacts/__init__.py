"""From verdict to artefact: the smallest failing case (shrink), a standalone
reproducer (repro), a regression test for the operator's repository
(regression), pictures of where the error sits (pictures), and closing the
loop after a fix (verify).

Importing this package imports neither torch nor matplotlib: the MCP server
imports it at start-up.  Every module reads a run only through RunStore.
"""
