"""Conditions over one case: the language every finding is written in (the tool's and
the agent's), the properties a case has, and what a condition predicts on a run.

- ``language``: parse a condition (the standard ``ast`` behind a whitelist), its nodes,
  its evaluation over a case's properties, its canonical text;
- ``limits``: dtype limits by name (``float16.max``), without torch;
- ``grammar``: the tool's own hypotheses as productions of the language (the derived quantities, their
  cost, the space that enumerates them), and an axis of that space as an expression of the language;
- ``properties``: the properties of one case (its spec and its recorded result);
- ``predict``: a condition against a run's recorded cases (agreeing, contradicting,
  undefined) and its fate.
"""
