# Sourced by the stand-ins: one line per call in $STANDIN_LOG, "TOOL<TAB>NODE<TAB>ARGS" (NODE: the
# node of the srun task it runs in, "batch" for the batch script itself). Short appends are atomic.
record() { printf '%s\t%s\t%s\n' "$1" "${SLURMD_NODENAME:-batch}" "${*:2}" >>"$STANDIN_LOG"; }
