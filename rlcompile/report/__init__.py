"""Tables and plots shared by the CLI and the benchmarks."""
