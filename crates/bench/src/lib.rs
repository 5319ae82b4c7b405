//! Benchmarks of hybridkv: the in-process engine benchmark (`src/bin/engine_bench.rs`) and the
//! RESP load generator behind `hybridkv bench`.
