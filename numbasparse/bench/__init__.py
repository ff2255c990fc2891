"""Benchmark helpers (CUDA-event timing); the full harness is an open issue."""
