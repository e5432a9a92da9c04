"""Simulators only the benchmarks run: the GPU cluster simulator (GFS, paper 002), its workloads, and the forecast metrics."""
