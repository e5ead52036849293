"""The guard: rules over verl's per-step values, and each rule's action, in the TaskRunner.

* ``rules``: the rules (built-in defaults and file format in ``rules.yaml``) and their evaluation;
* ``actions``: the hooks that hand each step's values to the rules and act (record, alert,
  checkpoint, stop);
* ``generation``: the training batch's degenerate responses, measured for the rules beside verl's values;
* ``checkpoint``: the guard's checkpoint, never at the cost of one of verl's, and what resuming picks;
* ``stop_exit``: a stop's marker file and exit code, for a scheduler to tell it from a finished run.

docs/guard.md.
"""
