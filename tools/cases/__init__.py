"""The case library: a case as data, pure (no evidence, no tools, no torch).

- ``axes``: the labelled axes of a case and the variation axes two cases differ in;
- ``derived``: typed and derived axes (ranks, dimensions, alignments, contiguity,
  value classes), each with the variation axis that moves it;
- ``stars``: a base case plus one-axis variations, expanded into cases;
- ``ids``: derived ids, rerun ids, a case's content without its id;
- ``neighbours``: cases without a one-axis neighbour (plan-time warnings).

Planning (plan_cases.py), analysis, capture planning, suggestions and
artefacts import this package; it imports only the schemas.
"""
