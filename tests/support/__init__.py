"""What tests share beyond fixtures: importable as ``support`` (pytest puts ``tests/`` on ``sys.path``
for the root ``conftest.py``). New shared helpers belong here rather than in bare modules."""
