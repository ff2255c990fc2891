"""Graph reorderings (Louvain clustering, LOA): not yet implemented, see the open issues."""
