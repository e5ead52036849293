"""What summary and report say about a run: one module per fact."""
