"""Per-window core selector (HC-SpMM): not yet implemented, see the open issues."""
