"""A run folder's model and its two renderers: ``model`` (``build``: one reading of the run, a
``Report``), ``text`` (the summary's lines) and ``page`` (the report's HTML, drawn with ``charts``,
``markup`` and ``assets/``). The commands are ``offline.summary`` and ``offline.report``."""
