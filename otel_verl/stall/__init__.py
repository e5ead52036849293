"""The stall doctor: when no training step has finished for ``OTEL_VERL_STALL_AFTER``, every verl
process of the job reports where each of its threads is.

* ``watchdog``: in the TaskRunner, the step clock and the decision (a stall starts, repeats, ends);
* ``reporter``: a thread in every verl process that reads the decision and reports its stacks;
* ``stacks``: the formatted stacks of all threads of this process, as a log record.

The decision reaches every process, on every host, through the job board (``otel_verl.job_board``,
topic ``stall``: Ray's GCS key-value store).

docs/stall-doctor.md.
"""
